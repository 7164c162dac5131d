"""Wrong on purpose: the two groups the other way round — reduce-scatter across the
replicas, all-reduce within the row."""

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
