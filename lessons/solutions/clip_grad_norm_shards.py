"""Reference solution: clip_grad_norm_ on sharded gradients (lesson 32).

Check: ``python -m minidp exercise check clip_grad_norm_shards --path lessons/solutions/clip_grad_norm_shards.py``
"""

import math

import torch

from minidp.comm import all_reduce


def clip_grad_norm_shards(
    shards: list[torch.Tensor], max_norm: float, norm_type: float, group
) -> float:
    flat = torch.cat([g.detach().double().reshape(-1) for g in shards])  # this rank's elements
    if norm_type == math.inf:
        part = flat.abs().max() if flat.numel() else torch.tensor(0.0, dtype=torch.float64)
        total = all_reduce(part.reshape(1), op="max", group=group)[0]  # the largest |g|
    else:
        part = (flat * flat).sum().reshape(1)  # squares add up, norms do not
        total = all_reduce(part, group=group)[0].sqrt()
    coef = min(max_norm / (float(total) + 1e-6), 1.0)  # torch's clip coefficient
    for g in shards:
        g.mul_(coef)
    return float(total)
