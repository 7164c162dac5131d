"""no padding

Every rank must get the same number of indices (DDP runs one all-reduce per step on every
rank): pad the order by repeating its head up to a multiple of num_replicas (10 samples on
3 ranks -> 12), or cut it when drop_last.
"""

import torch


def distributed_sampler(n, num_replicas, rank, epoch, seed, shuffle, drop_last):
    order = list(range(n))
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    if drop_last:
        order = order[: n - n % num_replicas]
    return order[rank::num_replicas]  # the slip: without drop_last, the tail is uneven
