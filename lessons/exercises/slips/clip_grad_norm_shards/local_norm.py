"""local norm only

Each rank used the norm of its own shards: that is only a part of the norm, so ranks clip by
different factors and their replicas drift apart. Combine the parts over every rank
(all-reduce) before you use the norm.
"""

import math

import torch


def clip_grad_norm_shards(shards, max_norm, norm_type, group):
    flat = torch.cat([g.double().reshape(-1) for g in shards])
    if not flat.numel():
        total = 0.0
    else:
        total = float(flat.abs().max() if norm_type == math.inf else flat.norm())
    coef = min(max_norm / (total + 1e-6), 1.0)
    for g in shards:
        g.mul_(coef)
    return total
