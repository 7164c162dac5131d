"""squares averaged over ranks

The sum of squares was all-reduced with op="avg" (or divided by the world size): a norm sums
every element's square over every rank — nothing is averaged. All-reduce with op="sum", then
take the square root.
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
        squares = all_reduce((flat * flat).sum().reshape(1), op="avg", group=group)
        total = float(squares[0]) ** 0.5
    coef = min(max_norm / (total + 1e-6), 1.0)
    for g in shards:
        g.mul_(coef)
    return total
