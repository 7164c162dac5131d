"""forgot the 1e-6

The coefficient is max_norm / (total_norm + 1e-6) in torch (the 1e-6 guards a zero norm):
add it, so your gradients match torch's to the last digits.
"""

import math

import torch

from minidp.comm import all_reduce


def clip_grad_norm_shards(shards, max_norm, norm_type, group):
    flat = torch.cat([g.double().reshape(-1) for g in shards])
    if norm_type == math.inf:
        part = flat.abs().max() if flat.numel() else torch.tensor(0.0, dtype=torch.float64)
        total = float(all_reduce(part.reshape(1), op="max", group=group)[0])
    else:
        total = float(all_reduce((flat * flat).sum().reshape(1), group=group)[0]) ** 0.5
    coef = min(max_norm / total, 1.0) if total else 1.0
    for g in shards:
        g.mul_(coef)
    return total
