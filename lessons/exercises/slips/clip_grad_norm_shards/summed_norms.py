"""summed the norms

Norms do not add: ‖(a, b)‖₂ = sqrt(‖a‖² + ‖b‖²). All-reduce (sum) each rank's *sum of
squares*, then take the square root once.
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
        total = float(all_reduce(flat.norm().reshape(1), group=group)[0])  # norms do not add
    coef = min(max_norm / (total + 1e-6), 1.0)
    for g in shards:
        g.mul_(coef)
    return total
