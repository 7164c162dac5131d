"""local statistics only

Every rank returned the mean and variance of its own rows: nothing was all-reduced, so ranks
normalise differently. Each rank needs statistics of the whole batch: which per-channel
totals, summed over ranks, make them?
"""

import torch


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    var, mean = torch.var_mean(x, dim=0, correction=0)
    return mean, var
