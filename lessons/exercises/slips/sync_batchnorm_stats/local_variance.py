"""variance over this rank's rows only

The mean is global, but the variance is taken over your own rows only: the squared
deviations (or squares) must be summed over every rank's rows too, and divided by the global
N.
"""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    c = x.shape[1]
    totals = torch.cat([x.sum(0), torch.tensor([float(len(x))], dtype=x.dtype)])
    all_reduce(totals, group=group)
    mean = totals[:c] / totals[-1]
    return mean, ((x - mean) ** 2).mean(0)
