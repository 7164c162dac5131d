"""pieces of different sizes

A reduce-scatter needs equal pieces on every rank: pad dim 0 to a multiple of S (k =
ceil(rows / S) rows per piece) before cutting, and cut the padding off after.
"""

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
