"""mesh groups swapped

You reduce-scattered across replicate_group and all-reduced in shard_group: the groups are
the other way round. Your row, shard_group, splits the gradient (reduce-scatter there); your
column, replicate_group, holds the same shard of other batches (all-reduce the piece there).
"""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = replicate_group.size(), replicate_group.rank()
    world = s * shard_group.size()
    rows = grad.shape[0]
    k = -(-rows // s)
    padded = torch.cat([grad, grad.new_zeros((k * s - rows, *grad.shape[1:]))])
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, list(padded.split(k)), group=replicate_group)
    all_reduce(piece, group=shard_group)
    return (piece / world)[: max(min(rows - me * k, k), 0)].clone()
