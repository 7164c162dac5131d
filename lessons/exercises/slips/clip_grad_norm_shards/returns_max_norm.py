"""returned max_norm, not the norm

The shards are clipped right, but the value you return is max_norm: clip_grad_norm_ returns
the total norm it measured (before clipping) — callers log it, and skip a step when it is
inf or nan.
"""

import math

import torch

from minidp.comm import all_reduce


def clip_grad_norm_shards(shards, max_norm, norm_type, group):
    flat = [g.double().reshape(-1) for g in shards]
    if norm_type == math.inf:
        local = max([float(f.abs().max()) for f in flat if f.numel()], default=0.0)
        total = torch.tensor([local], dtype=torch.float64)
        all_reduce(total, op="max", group=group)
        norm = float(total[0])
    else:
        total = torch.tensor([sum(float((f * f).sum()) for f in flat)], dtype=torch.float64)
        all_reduce(total, group=group)
        norm = float(total[0]) ** 0.5
    coef = min(max_norm / (norm + 1e-6), 1.0)
    for g in shards:
        g.mul_(coef)
    return max_norm  # the slip
