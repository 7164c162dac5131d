"""Wrong on purpose: cuts the rows as evenly as possible (tensor_split), not as torch.chunk;
pieces padded to the longest so the reduce-scatter gets equal sizes."""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    world = s * replicate_group.size()
    parts = list(grad.tensor_split(s))
    k = max(p.shape[0] for p in parts)
    pieces = [torch.cat([p, p.new_zeros((k - p.shape[0], *p.shape[1:]))]) for p in parts]
    piece = torch.empty_like(pieces[0])
    reduce_scatter(piece, pieces, group=shard_group)
    all_reduce(piece, group=replicate_group)
    return (piece / world)[: parts[me].shape[0]].clone()
