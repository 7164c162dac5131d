"""Reference solution: minidp's textbook sampler (``minidp/ddp/textbook_sampler.py``;
lesson 12 prints it).

Check: ``python -m minidp exercise check distributed_sampler --path lessons/solutions/distributed_sampler.py``
"""

from minidp.ddp.textbook_sampler import DistributedSampler


def distributed_sampler(
    n: int, num_replicas: int, rank: int, epoch: int, seed: int, shuffle: bool, drop_last: bool
) -> list[int]:
    sampler = DistributedSampler(range(n), num_replicas, rank, shuffle, seed, drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)
