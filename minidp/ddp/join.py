"""Uneven inputs: ranks that run out of batches *shadow* the collectives of the others.

minidp's DDP is a ``Joinable`` of torch's ``Join``, so ``with Join([ddp_model, optimizer]):``
(minidp's or torch's DDP and ZeRO, in any mix) and ``with ddp_model.join():`` work. While
ranks still train (each forward all-reduces a 1), a joined rank runs
:meth:`DDPJoinHook.main_hook`: their collectives with zeros, which change no sum;
:meth:`DDPJoinHook.post_hook` then gives every rank the last joiner's parameters.

Test: ``pytest tests/test_ddp_join.py``
"""

from __future__ import annotations

import torch
from torch.distributed.algorithms.join import JoinHook

from minidp.comm import all_reduce


class DDPJoinHook(JoinHook):
    """What a joined rank runs for minidp's DDP (``ddp.join_hook(...)`` makes one)."""

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
