"""ZeRO-1 and ZeRO-2 as on a whiteboard: after backward, one collective per parameter.

* :class:`TextbookZero1` — every rank gets the whole averaged gradient (a ring all-reduce
  per parameter, as DDP would), only the owner steps a parameter, then broadcasts it.
* :class:`TextbookZero2` — each gradient is reduce-scattered (each rank receives only its
  rows, summed), each rank steps its rows, then all-gathers the parameter.

Both are built from the book's collectives (``collectives.py``). ZeRO-2 is the first page
that cuts a tensor by rows, so the book's one padding rule lives here: :func:`pieces` pads
dim 0 to ``W`` pieces of ``ceil(rows / W)`` rows (``torch.chunk``'s cut, FSDP2's too); the
FSDP page uses it as it is. Who owns a whole parameter (ZeRO-1) is torch's rule, shared
with the engine (``minidp.zero.partition``), so the owners are torch's.

    opt = TextbookZero2(model.parameters(), torch.optim.AdamW, lr=1e-3)
    loss_fn(model(x), y).backward()          # plain backward: no hooks, no buckets
    opt.step()                               # reduce-scatter, step my rows, all-gather

Against torch (``tests/test_zero2.py``): ``torch.equal`` to torch's ZeroRedundancyOptimizer
+ DDP at 2 ranks, where the order of two additions cannot change the bits.

Test: ``pytest tests/test_zero2.py -k textbook tests/test_textbook_shard.py``
"""

from __future__ import annotations

import torch

from minidp.comm import group as groups
from minidp.textbook.collectives import all_gather, broadcast, reduce_scatter, ring_all_reduce
from minidp.zero.partition import partition_parameters


def rows_per_rank(rows: int, world: int) -> int:
    """``ceil(rows / world)``: the rows of every piece (the last ranks' are padding, or empty)."""
    return -(-rows // world)


def pieces(t: torch.Tensor, world: int) -> list[torch.Tensor]:
    """``t`` padded with zero rows to ``world`` equal pieces, cut on dim 0: piece ``r`` is
    rank ``r``'s rows (``torch.chunk``'s) followed by its padding."""
    c = rows_per_rank(t.shape[0], world)
    padded = t.new_zeros((c * world, *t.shape[1:]))
    padded[: t.shape[0]] = t
    return list(padded.view(world, c, *t.shape[1:]).unbind())  # world views, (c, ...) each


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
            ring_all_reduce(p.grad, "sum", self.group)
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
        rows = [rows_per_rank(p.shape[0], world) for p in self.params]
        self.shards = [  # views of my rows of each parameter: the optimizer steps them in place
            torch.nn.Parameter(p.detach()[rank * c : (rank + 1) * c])
            for p, c in zip(self.params, rows)
        ]
        self.optim = optimizer_class(self.shards, **defaults)

    @torch.no_grad()
    def step(self) -> None:
        world, rank = self.group.size(), self.group.rank()
        for p, shard in zip(self.params, self.shards):
            parts = pieces(p.grad / world, world)  # DDP divides first, then sums
            mine = reduce_scatter(torch.empty_like(parts[0]), parts, "sum", self.group)
            shard.grad = mine[: shard.shape[0]]  # my rows, summed over the ranks; no padding
            p.grad = None  # the full gradient is not kept
        self.optim.step()  # my rows of every parameter move, in place
        for p in self.params:
            parts = pieces(p, world)  # mine: the rows just stepped
            all_gather(parts, parts[rank].clone(), self.group)
            p.copy_(torch.cat(parts)[: p.shape[0]])

    def zero_grad(self) -> None:
        for p, shard in zip(self.params, self.shards):
            p.grad = shard.grad = None


# What the engine adds (``minidp.zero``: ``ZeroRedundancyOptimizer``, ``Zero2Optimizer``):
# buckets, so one message carries many parameters; ZeRO-2's reduce-scatter launched by
# gradient hooks *during* backward, overlapped with it, and the full ``.grad`` freed as
# soon as its rows are sent (here every full gradient lives until the step); the padded
# pieces laid out once, in the buckets, not cut afresh at every step; torch's API
# (``state_dict``, ``consolidate_state_dict``, ``add_param_group``, ``join``) and checks
# that every rank passes the same parameters; and the engine's collectives, gloo's order
# bit for bit at any world size (the book's ring agrees with gloo to rounding from 3 ranks).
