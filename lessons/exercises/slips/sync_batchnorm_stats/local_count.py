"""count not all-reduced

The sums are global but the count is not: you divided by this rank's rows times the world
size. Ranks hold different numbers of rows — all-reduce the count with the sums (one tensor
[Σx, Σx², n]) and divide by the global N.
"""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    c = x.shape[1]
    totals = torch.cat([x.sum(0), (x * x).sum(0)])
    all_reduce(totals, group=group)
    n = x.shape[0] * group.size()  # as if every rank held as many rows as this one
    mean = totals[:c] / n
    return mean, totals[c:] / n - mean * mean
