"""Gradients ready -> launch -> wait: the one engine behind DDP, ZeRO-2 and FSDP's backward.

Every overlapping data-parallel wrapper runs the same loop during backward. Gradients
arrive one parameter at a time (post-accumulate-grad hooks). Parameters belong to groups —
DDP's and ZeRO-2's buckets, FSDP's units — and a group's collective (an all-reduce, a
reduce-scatter) can start once the group's last gradient is in. It runs on the one
communication thread (``comm_thread.py``), so it travels while autograd computes the
earlier layers' gradients; everything launched is waited for only once the last group has
been launched — the end of backward, where the optimizer needs the results.

When a group may go is the one choice the wrappers make differently:

* ``in_order=True`` (DDP, ZeRO-2): strictly in group order, 0, 1, 2, ..., even if a later
  group fills first. Every rank must run the same collectives in the same order, and with
  unused parameters, or threads, gradients may arrive in a different order on different
  ranks; bucket indices cannot differ.
* ``in_order=False`` (FSDP): as each group completes. A unit's gradients are complete when
  autograd has left the unit, in the same order on every rank (the same graph); holding a
  unit back would only delay it (the root unit, whose embedding's gradient comes last,
  is first in the forward's reverse order).

What a group's collective is belongs to the caller: ``launch(i)`` is called on the
autograd thread when group ``i`` goes and returns the function the communication thread
runs, or ``None`` when there is nothing to send (so the caller can take the gradients and
free memory at once, and the thread only communicates).

Test: ``pytest tests/test_launch_queue.py`` (and every DDP, ZeRO-2 and FSDP test)
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from minidp.comm.comm_thread import CommThread


class LaunchQueue:
    """Counts each group's pending gradients; launches complete groups; waits at the end.

    Args:
        comm: the communication thread the collectives run on (one per group of ranks).
        launch: ``launch(i) -> fn``; the thread runs ``fn()``, its result is group ``i``'s.
        in_order: launch groups in index order (DDP, ZeRO-2) or as they complete (FSDP).
    """

    def __init__(self, comm: CommThread, launch: Callable[[int], Callable[[], Any]], in_order):
        self.comm = comm
        # The owner (a reducer, an optimizer) holds this queue: a strong bound method back to
        # it would make a cycle, and a dropped owner would live on until the cycle collector
        # runs (an optimizer claims its parameters until it is gone), so it is held weakly.
        bound = hasattr(launch, "__self__")
        self._launch = weakref.WeakMethod(launch) if bound else None
        self._plain = None if bound else launch
        self.in_order = in_order
        self.pending: list[int] = []  # per group: gradients still to come this backward
        self.futures: list[Future | None] = []  # per group, once launched
        self.next = 0  # in order: the lowest group not launched yet
        self.launched = 0  # how many groups went this backward
        self.hold = False  # launch nothing before every group is complete

    def start(self, counts: list[int], hold: bool = False) -> None:
        """A new backward: group ``i`` waits for ``counts[i]`` gradients. ``hold=True``
        launches nothing before every group is complete (DDP's ``overlap=False``)."""
        self.pending = list(counts)
        self.futures = [None] * len(counts)
        self.next = self.launched = 0
        self.hold = hold
        self._go()  # groups with nothing to wait for (all frozen, or empty) go at once

    def ready(self, i: int) -> None:
        """One more gradient of group ``i`` is in; launch whatever may go now."""
        self.pending[i] -= 1
        if self.pending[i] == 0 and not self.in_order and not self.hold:
            self._submit(i)
        elif self.pending[i] == 0:
            self._go()

    def _go(self) -> None:
        if self.hold and any(self.pending):
            return
        if not self.in_order:  # complete groups, in index order among themselves
            for i, left in enumerate(self.pending):
                if left == 0 and self.futures[i] is None:
                    self._submit(i)
            return
        while self.next < len(self.pending) and self.pending[self.next] == 0:
            self._submit(self.next)
            self.next += 1

    def _submit(self, i: int) -> None:
        fn = (self._plain if self._launch is None else self._launch())(i)
        if fn is None:  # nothing to communicate for this group: done already
            self.futures[i] = Future()
            self.futures[i].set_result(None)
        else:
            self.futures[i] = self.comm.submit(fn)
        self.launched += 1

    @property
    def all_launched(self) -> bool:
        """Every group has gone: the end of this backward's communication is in sight."""
        return self.launched == len(self.pending)

    def wait(self) -> list:
        """Every launched group's result, in group order (``None`` for a group that did not
        go: a backward that ended early); re-raises the thread's errors."""
        return [None if f is None else f.result() for f in self.futures]
