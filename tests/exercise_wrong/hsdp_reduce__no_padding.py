"""Wrong on purpose: cuts the gradient into S pieces without padding them to one size."""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    world = s * replicate_group.size()
    pieces = [p.contiguous() for p in grad.chunk(s)]
    while len(pieces) < s:
        pieces.append(grad.new_zeros((0, *grad.shape[1:])))
    piece = torch.empty_like(pieces[me])
    reduce_scatter(piece, pieces, group=shard_group)
    all_reduce(piece, group=replicate_group)
    return piece / world
