"""padding put in front

You padded dim 0 at the front: every piece is then shifted by the padding, and each rank's
rows are its neighbour's. Pad at the END (torch.cat([grad, zeros])), so that piece r starts
at row r * k as torch.chunk's does.
"""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    world = s * replicate_group.size()
    rows = grad.shape[0]
    k = -(-rows // s)
    padded = torch.cat([grad.new_zeros((k * s - rows, *grad.shape[1:])), grad])  # the slip
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, list(padded.split(k)), group=shard_group)
    all_reduce(piece, group=replicate_group)
    piece = piece / world
    return piece[: max(min(rows - me * k, k), 0)].clone()
