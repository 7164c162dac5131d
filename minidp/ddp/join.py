"""Uneven inputs: ranks that run out of batches *shadow* the collectives of the others.

The problem: every DDP iteration is a fixed sequence of collectives (bucket all-reduces,
buffer broadcasts). If rank 1 has 10 batches and rank 0 has 9, rank 1's tenth backward
waits for rank 0's all-reduce forever.

The fix is torch's ``Join`` context manager (``torch.distributed.algorithms.join``), and
minidp's DDP is one of its ``Joinable`` objects, so the line a script already has works:
``with Join([ddp_model, optimizer]):`` — with minidp's or torch's DDP and
ZeroRedundancyOptimizer, in any mix — and so does ``with ddp_model.join():``.

How it works. Every forward of a rank still training tells the context "I am here" (an
all-reduce of 1, made by ``Join.notify_join_context``). A rank whose loop has ended
enters ``Join.__exit__`` and, while that count is not 0, runs each joinable's
:meth:`DDPJoinHook.main_hook` — for DDP, one iteration's collectives, in forward order:

    rebuild the buckets if due (a broadcast), broadcast buffers from the highest rank
    still training, all-reduce 0 (answers "will you sync this backward?"), then
    all-reduce a zero bucket for every bucket, in order (the others' backward)

Zeros change no sum, so the ranks still training see the average of their own gradients,
divided by the *initial* world size (or, with ``divide_by_initial_world_size=False``, by
the number of ranks still training: the "I am here" count). When every rank has joined,
:meth:`DDPJoinHook.post_hook` makes every replica take the parameters of the last rank to
join. ``throw_on_early_termination=True``: the first rank to run out makes every rank
raise instead (``Join`` does that itself).

Test: ``pytest tests/test_ddp_join.py``
"""

from __future__ import annotations

import torch
from torch.distributed.algorithms.join import JoinHook

from minidp.comm import all_reduce


class DDPJoinHook(JoinHook):
    """What a joined rank runs for minidp's DDP (``ddp.join_hook(...)`` makes one).

    Args:
        ddp: the ``minidp.DistributedDataParallel`` being trained.
        divide_by_initial_world_size: keep dividing gradients by the initial world size
            (every sample weighs the same), or by the ranks still training.
    """

    def __init__(self, ddp, divide_by_initial_world_size: bool = True) -> None:
        super().__init__()
        self.ddp = ddp
        ddp._divide_by_initial_world_size = divide_by_initial_world_size

    def main_hook(self) -> None:
        """Shadow one iteration of the ranks still training: the same collectives, zeros."""
        ddp = self.ddp
        ddp.reducer.prepare_for_forward()  # a rebuild, if due, broadcasts: take part
        if ddp._will_sync_buffers():
            ddp._sync_buffers(common_rank(ddp.process_group, False))
        will_sync = _sum(ddp.process_group, 0.0) != 0
        ddp.require_forward_param_sync = will_sync
        if will_sync:
            ddp.reducer.shadow_backward()

    def post_hook(self, is_last_joiner: bool) -> None:
        """Every rank takes the parameters (and buffers) of the last rank to join."""
        ddp = self.ddp
        src = common_rank(ddp.process_group, is_last_joiner)
        states = [p.detach() for p in ddp.module.parameters()]
        if ddp.forward_sync_buffers:
            states += [b.detach() for b in ddp._buffers_list()]
        ddp._broadcast_coalesced(states, src)


def announce_sync(group, will_sync: bool) -> None:
    """A rank still training tells joined ranks whether this iteration's backward syncs."""
    _sum(group, 1.0 if will_sync else 0.0)


def common_rank(group, candidate: bool) -> int:
    """The highest group rank among the candidates (buffers come from a rank still training)."""
    t = torch.tensor([group.rank() if candidate else -1], dtype=torch.int64)
    all_reduce(t, "max", group)
    if int(t) < 0:
        raise RuntimeError("Join: no rank qualified as the source — a minidp bug")
    return int(t)


def _sum(group, value: float) -> float:
    t = torch.tensor([value])
    all_reduce(t, "sum", group)
    return float(t)
