"""clipped copies, shards unchanged

The norm is right but the shards you were given still hold their old values: clip_grad_norm_
scales the gradients IN PLACE (g.mul_(coef)); g = g * coef makes a new tensor that nobody
keeps.
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
    coef = min(max_norm / (total + 1e-6), 1.0)
    shards = [g * coef for g in shards]  # new tensors, dropped on return
    return total
