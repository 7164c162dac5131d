"""inf-norm without abs()

The inf-norm is the largest ABSOLUTE value: a gradient of -5 counts as 5. Take g.abs().max()
on each rank before the all-reduce with op="max".
"""

import math

import torch

from minidp.comm import all_reduce


def clip_grad_norm_shards(shards, max_norm, norm_type, group):
    flat = torch.cat([g.double().reshape(-1) for g in shards])
    if norm_type == math.inf:
        part = flat.max() if flat.numel() else torch.tensor(-math.inf, dtype=torch.float64)
        total = float(all_reduce(part.reshape(1), op="max", group=group)[0])  # no abs()
    else:
        total = float(all_reduce((flat * flat).sum().reshape(1), group=group)[0]) ** 0.5
    coef = min(max_norm / (total + 1e-6), 1.0)
    for g in shards:
        g.mul_(coef)
    return total
