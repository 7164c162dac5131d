"""``DistributedSampler``: give each rank its own slice of the dataset, the same way torch does.

One permutation on every rank (seed + epoch), padded by repeating its head (or cut) to a
multiple of the world size; each rank takes every ``num_replicas``-th index from its rank
on, so all get as many (the idea alone: ``minidp/textbook/sampler.py``)::

    len 10, 3 ranks, no shuffle:  rank 0 [0, 3, 6, 9]   rank 1 [1, 4, 7, 0]   rank 2 [2, 5, 8, 1]

Test: ``pytest tests/test_sampler.py``
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

import torch

from minidp.comm import group as groups


class DistributedSampler(torch.utils.data.Sampler):
    """Indices of this rank's share of ``dataset`` (identical to torch's sampler); call
    ``set_epoch`` every epoch, or every epoch sees the same order."""

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None or rank is None:
            g = groups.resolve(None)
            num_replicas = g.size() if num_replicas is None else num_replicas
            rank = g.rank() if rank is None else rank
        if num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be >= 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(
                f"DistributedSampler: rank must be in [0, {num_replicas - 1}] for "
                f"num_replicas={num_replicas}, got {rank}"
            )
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)  # largest fit
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)  # same on every rank: one shared order
            indices = torch.randperm(n, generator=g).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[: self.total_size]
        elif self.total_size > n:
            padding = self.total_size - n  # repeated from the start, again if n is tiny
            indices += (indices * math.ceil(padding / n))[:padding]
        return iter(indices[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` in the shuffle seed (call once per epoch, before iterating)."""
        self.epoch = epoch
