"""Wrong on purpose: the shards are clipped right, but max_norm is returned as the norm."""

import math

import torch

from minidp.comm import all_reduce


def clip_grad_norm_shards(shards, max_norm, norm_type, group):
    if math.isinf(norm_type):
        part = torch.tensor(
            [max((s.abs().max().item() for s in shards if s.numel()), default=0.0)],
            dtype=torch.float64,
        )
        all_reduce(part, op="max", group=group)
        total = part.item()
    else:
        squares = sum(s.double().pow(2).sum().item() for s in shards)
        part = torch.tensor([squares], dtype=torch.float64)
        all_reduce(part, group=group)
        total = part.sqrt().item()
    scale = max_norm / (total + 1e-6)
    if scale < 1:
        for s in shards:
            s.mul_(scale)
    return max_norm
