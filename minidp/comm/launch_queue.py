"""Gradients ready -> launch -> wait: the one engine behind DDP, ZeRO-2 and FSDP's backward.

Test: ``pytest tests/test_launch_queue.py`` (and every DDP, ZeRO-2 and FSDP test)

Parameters belong to groups (DDP's and ZeRO-2's buckets, FSDP's units). When a group's
last gradient is in, ``launch(i)`` (the caller's, on the autograd thread) returns what the
communication thread runs (or ``None``: nothing to send), so it travels while autograd
computes on; all is waited for at the end of backward. ``in_order=True`` (DDP, ZeRO-2):
strictly in index order, since gradients may arrive in different orders on different
ranks. ``in_order=False`` (FSDP): as each completes (autograd leaves the units in the same
order on every rank).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from minidp.comm.comm_thread import CommThread


class LaunchQueue:
    """Counts each group's pending gradients, launches complete groups on ``comm`` (the
    thread runs ``launch(i)()``; its result is group ``i``'s), waits at the end."""

    def __init__(self, comm: CommThread, launch: Callable[[int], Callable[[], Any]], in_order):
        self.comm = comm
        # weakly: the owner holds this queue, and a cycle would keep a dropped owner alive
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
