"""Reference solution: DistributedSampler's indices for one rank and epoch, written out
(lesson 12 prints minidp's own, ``minidp/textbook/sampler.py``; the check makes that
one and torch's unavailable).

Check: ``python -m minidp exercise check distributed_sampler --path lessons/solutions/distributed_sampler.py``
"""

import torch


def distributed_sampler(
    n: int, num_replicas: int, rank: int, epoch: int, seed: int, shuffle: bool, drop_last: bool
) -> list[int]:
    order = list(range(n))
    if shuffle:  # the SAME permutation on every rank: seeded by seed + epoch
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    if drop_last:
        order = order[: n - n % num_replicas]  # cut the tail
    else:
        order += (order * num_replicas)[: -n % num_replicas]  # repeat the head
    return order[rank::num_replicas]
