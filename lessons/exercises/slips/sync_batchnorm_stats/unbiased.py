"""unbiased variance

You divided by N - 1: BatchNorm normalises with the biased variance (divide by N,
correction=0). The unbiased one is only what goes into running_var.
"""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    c = x.shape[1]
    n = torch.tensor([float(x.shape[0])], dtype=torch.float64)
    totals = torch.cat([x.sum(0), (x * x).sum(0), n])
    all_reduce(totals, group=group)
    total = totals[-1]
    mean = totals[:c] / total
    var = (totals[c : 2 * c] - total * mean * mean) / (total - 1)
    return mean, var
