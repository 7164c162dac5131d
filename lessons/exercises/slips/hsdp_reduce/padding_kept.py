"""padding rows left in

You returned the reduce-scatter's whole piece, padding included: keep only the rows
torch.chunk gives your shard — max(min(rows - rank * k, k), 0) of them.
"""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s = shard_group.size()
    world = s * replicate_group.size()
    rows = grad.shape[0]
    k = -(-rows // s)
    padded = torch.cat([grad, grad.new_zeros((k * s - rows, *grad.shape[1:]))])
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, list(padded.split(k)), group=shard_group)
    all_reduce(piece, group=replicate_group)
    return piece / world  # k rows, whatever torch.chunk gives this rank
