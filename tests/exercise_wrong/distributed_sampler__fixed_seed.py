"""Wrong on purpose: the shuffle is seeded with `seed` alone — every epoch the same order."""

import torch


def distributed_sampler(n, num_replicas, rank, epoch, seed, shuffle, drop_last):
    g = torch.Generator()
    g.manual_seed(seed)
    order = torch.randperm(n, generator=g).tolist() if shuffle else list(range(n))
    if drop_last:
        order = order[: len(order) // num_replicas * num_replicas]
    else:
        while len(order) % num_replicas:
            order += order[: num_replicas - len(order) % num_replicas]
    return order[rank::num_replicas]
