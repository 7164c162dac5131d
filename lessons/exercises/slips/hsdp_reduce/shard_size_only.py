"""divided by the shard size only

Every value is R times torch's: the average is over all W = R * S ranks — divide by the
replicate group's size too.
"""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    rows = grad.shape[0]
    k = -(-rows // s)
    padded = torch.cat([grad, grad.new_zeros((k * s - rows, *grad.shape[1:]))])
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, list(padded.split(k)), group=shard_group)
    all_reduce(piece, group=replicate_group)
    piece = piece / s  # the replicas' factor R is missing
    return piece[: max(min(rows - me * k, k), 0)].clone()
