"""sampler without set_epoch

Every epoch gets epoch 0's order: seed the shuffle with seed + epoch
(torch.Generator().manual_seed(seed + epoch)) — what sampler.set_epoch(epoch) does; without
it every epoch replays the same order.
"""

import torch


def distributed_sampler(n, num_replicas, rank, epoch, seed, shuffle, drop_last):
    order = list(range(n))
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    if drop_last:
        order = order[: n - n % num_replicas]
    else:
        order += (order * num_replicas)[: -n % num_replicas]
    return order[rank::num_replicas]
