"""forgot the replicas

Your shard is averaged over your shard group only: the ranks of your replicate group hold
the same shard of *other* batches' gradients. After the reduce-scatter, all-reduce the piece
across replicate_group.
"""

import torch

from minidp.comm import reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    rows = grad.shape[0]
    k = -(-rows // s)
    padded = torch.cat([grad, grad.new_zeros((k * s - rows, *grad.shape[1:]))])
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, list(padded.split(k)), op="avg", group=shard_group)
    return piece[: max(min(rows - me * k, k), 0)].clone()
