"""Wrong on purpose: the zero rows go in front of the gradient, so every piece is shifted."""

import torch
import torch.nn.functional as F

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    rows = grad.shape[0]
    k = -(-rows // s)
    flat = grad.reshape(rows, -1)
    padded = F.pad(flat, (0, 0, k * s - rows, 0)).reshape(k * s, *grad.shape[1:])
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, [padded[i * k : (i + 1) * k] for i in range(s)], group=shard_group)
    all_reduce(piece, group=replicate_group)
    piece = piece / (s * replicate_group.size())
    return piece[: max(min(rows - me * k, k), 0)].clone()
