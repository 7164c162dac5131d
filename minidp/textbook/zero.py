"""ZeRO-1 and ZeRO-2 as on a whiteboard: after backward, one collective per parameter.

The faithful versions (``zero1.py``, ``zero2.py``) add what makes them usable: buckets
(one message per many parameters), gradients reduced *during* backward, torch's API
(``state_dict``, ``add_param_group``), checks across ranks. These two keep only the idea:

* :class:`TextbookZero1` — every rank gets the whole averaged gradient (an all-reduce per
  parameter, as DDP would), only the owner steps a parameter, then broadcasts it.
* :class:`TextbookZero2` — each gradient is reduce-scattered (each rank receives only its
  rows, summed), each rank steps its rows, then all-gathers the parameter.

Neither buckets nor overlaps communication with backward; ``TextbookZero2`` pads each
tensor to ``W`` equal pieces afresh at every call, where ``Zero2Optimizer`` lays the padded
pieces out once, in its buckets.

Against torch (``tests/test_zero2.py``): ``torch.equal`` to torch's ZeroRedundancyOptimizer
+ DDP at 2 ranks, where the order of two additions cannot change the bits.

Test: ``pytest tests/test_zero2.py -k textbook``
"""

from __future__ import annotations

import torch

from minidp.comm import all_gather, all_reduce, broadcast, reduce_scatter
from minidp.comm import group as groups
from minidp.zero.partition import partition_parameters, row_range, rows_per_rank


class TextbookZero1:
    """ZeRO-1: all-reduce every gradient, the owner steps, the owner broadcasts."""

    def __init__(self, params, optimizer_class, group=None, **defaults) -> None:
        self.group = groups.resolve(group)
        self.params = [p for p in params if p.requires_grad]
        world, rank = self.group.size(), self.group.rank()
        mine = partition_parameters([{"params": self.params}], world)
        self.owner = {p: r for r in range(world) for p in mine[r][0]["params"]}
        self.optim = optimizer_class(mine[rank], **defaults)

    @torch.no_grad()
    def step(self) -> None:
        world = self.group.size()
        for p in self.params:
            p.grad.div_(world)  # DDP divides first, then sums
            all_reduce(p.grad, "sum", self.group)
        self.optim.step()  # only my parameters move
        for p in self.params:
            broadcast(p, self.owner[p], self.group)  # the owner's new values, everywhere

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


class TextbookZero2:
    """ZeRO-2: reduce-scatter every gradient by rows, step my rows, all-gather."""

    def __init__(self, params, optimizer_class, group=None, **defaults) -> None:
        self.group = groups.resolve(group)
        self.params = [p for p in params if p.requires_grad]
        world, rank = self.group.size(), self.group.rank()
        self.rows = [row_range(p.shape[0], world, rank) for p in self.params]
        self.shards = [
            torch.nn.Parameter(p.detach()[a:b]) for p, (a, b) in zip(self.params, self.rows)
        ]
        self.optim = optimizer_class(self.shards, **defaults)  # rows of my slice, in place

    def _pieces(self, t: torch.Tensor) -> list[torch.Tensor]:
        """``t`` cut on dim 0 into one padded piece per rank, ``ceil(rows/W)`` rows each."""
        world = self.group.size()
        c = rows_per_rank(t.shape[0], world)
        padded = torch.zeros((c * world, *t.shape[1:]), dtype=t.dtype)
        padded[: t.shape[0]] = t
        return list(padded.chunk(world)) if c else [padded] * world

    @torch.no_grad()
    def step(self) -> None:
        world = self.group.size()
        for p, shard, (a, b) in zip(self.params, self.shards, self.rows):
            pieces = self._pieces(p.grad / world)
            mine = torch.empty_like(pieces[0])
            reduce_scatter(mine, pieces, "sum", self.group)  # my rows, summed over ranks
            shard.grad = mine[: b - a]
            p.grad = None  # the full gradient is not kept
        self.optim.step()
        for p, shard in zip(self.params, self.shards):
            pieces = self._pieces(p.detach())
            mine = pieces[self.group.rank()].clone()
            mine[: shard.shape[0]] = shard
            all_gather(pieces, mine, self.group)
            p.copy_(torch.cat(pieces)[: p.shape[0]])

    def zero_grad(self) -> None:
        for p, shard in zip(self.params, self.shards):
            p.grad = shard.grad = None
