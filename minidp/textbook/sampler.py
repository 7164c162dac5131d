"""DistributedSampler in a few lines: same shuffle everywhere, pad, take every W-th index.

Why this exists: :class:`minidp.DistributedSampler` (``sampler.py``) is the faithful one,
written like torch's with its length arithmetic spelled out; this is the idea alone::

    order = the same permutation on every rank (seeded with seed + epoch)
    pad it by repeating its head (or cut it, drop_last) to a multiple of W
    rank r takes order[r], order[r + W], order[r + 2W], ...

Both this and the engine's give exactly the indices of
``torch.utils.data.DistributedSampler``.

Test: ``pytest tests/test_textbook_dp_ddp.py -k sampler``
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch


class DistributedSampler(torch.utils.data.Sampler):
    """This rank's share of ``dataset``'s indices; call ``set_epoch`` every epoch."""

    def __init__(self, dataset: Sized, num_replicas: int, rank: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False) -> None:  # fmt: skip
        if not 0 <= rank < num_replicas:
            raise ValueError(
                f"textbook DistributedSampler: expected 0 <= rank < num_replicas, got rank="
                f"{rank}, num_replicas={num_replicas} — pass the group's rank and size"
            )
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch  # without this, every epoch replays the same shuffle

    def __iter__(self) -> Iterator[int]:
        n, world = len(self.dataset), self.num_replicas
        order = list(range(n))
        if self.shuffle:  # every rank draws the SAME permutation: no communication needed
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        if self.drop_last:
            order = order[: n - n % world]  # cut the tail: every rank gets n // W
        else:
            order += (order * world)[: -n % world]  # repeat the head: every rank ceil(n / W)
        return iter(order[self.rank :: world])  # rank r: r, r + W, r + 2W, ...

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.num_replicas if self.drop_last else -(-n // self.num_replicas)


# What the engine adds (:class:`minidp.DistributedSampler`, ``minidp/ddp/sampler.py``):
# ``num_replicas`` / ``rank`` from the current process group by default and a check of
# them, ``len()`` computed without building the list, and the arithmetic written the way
# torch writes it.
