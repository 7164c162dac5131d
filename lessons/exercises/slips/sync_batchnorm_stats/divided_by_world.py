"""sums divided by the world size

You divided the all-reduced sums by the number of ranks: that is a mean of per-rank sums,
not of rows. The mean is over every ROW: divide by the total row count N, which must be
all-reduced too (ranks hold different numbers of rows).
"""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    c = x.shape[1]
    totals = torch.cat([x.sum(0), (x * x).sum(0)])
    all_reduce(totals, group=group)
    mean = totals[:c] / group.size()  # per rank, not per row
    return mean, totals[c:] / group.size() - mean * mean
