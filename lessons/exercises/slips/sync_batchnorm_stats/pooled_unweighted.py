"""between-rank term unweighted

The within-rank variances are weighted by their rows, but the between-rank term Σ (m_r - M)²
is divided by the number of ranks: each rank's mean stands for n_r rows, so it needs the
same weight, Σ n_r (m_r - M)² / N.
"""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    c, world = x.shape[1], group.size()
    n = float(x.shape[0])
    local_mean, local_var = x.mean(0), x.var(0, correction=0)
    totals = torch.cat([x.sum(0), n * local_var, torch.tensor([n], dtype=x.dtype)])
    all_reduce(totals, group=group)
    count = totals[-1]
    mean = totals[:c] / count
    between = (local_mean - mean) ** 2
    all_reduce(between, group=group)
    return mean, totals[c : 2 * c] / count + between / world
