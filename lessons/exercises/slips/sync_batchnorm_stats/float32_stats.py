"""statistics in float32

x is float64, and so must the statistics be: you computed them in float32 (a .float(), a
float32 buffer), which rounds at about 1e-7 — and BatchNorm returns its input's dtype. Keep
the input's dtype: torch.zeros(..., dtype=x.dtype), no .float().
"""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    x32 = x.float()  # the slip
    c = x.shape[1]
    totals = torch.cat([x32.sum(0), (x32 * x32).sum(0), torch.tensor([float(x.shape[0])])])
    all_reduce(totals, group=group)
    n = totals[2 * c]
    mean = totals[:c] / n
    return mean, totals[c : 2 * c] / n - mean * mean
