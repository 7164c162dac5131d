"""Wrong on purpose (subgroup): minidp's all_reduce without group=: the default group."""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x, group):
    packed = torch.cat([x.sum(0), (x**2).sum(0), x.new_tensor([x.shape[0]])])
    all_reduce(packed)
    c = x.shape[1]
    mean = packed[:c] / packed[-1]
    return mean, packed[c:-1] / packed[-1] - mean**2
