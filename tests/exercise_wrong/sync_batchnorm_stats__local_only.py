"""Wrong on purpose: each rank's own statistics, nothing all-reduced."""

import torch


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    var, mean = torch.var_mean(x, dim=0, correction=0)
    return mean, var
