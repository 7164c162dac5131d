"""Wrong on purpose (mutated input): the variance pass centres the caller's x in place."""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x, group):
    n = torch.tensor([x.shape[0]], dtype=torch.float64)
    s = x.sum(dim=0)
    all_reduce(n, group=group)
    all_reduce(s, group=group)
    mean = s / n
    x.sub_(mean)
    ss = x.square().sum(dim=0)
    all_reduce(ss, group=group)
    return mean, ss / n
