"""Gradient hooks -> ready -> launch -> finish: the backward of DDP, ZeRO-2 and FSDP.

Test: ``pytest tests/test_launch_queue.py`` (and every DDP, ZeRO-2 and FSDP test)

An owner (DDP's reducer, ZeRO-2's optimizer, FSDP's root) groups its parameters (buckets,
units) and says only what is its own: ``counts()``, the gradients each group waits for in
the backward starting now; ``launch(i)``, what the communication thread runs for complete
group ``i`` (``None``: nothing to send); ``finish()``, once every group went: ``wait()``
and write the results back. The queue hooks the parameters (``hook``), arms at a backward's
first gradient (DDP: at forward, ``arm``), counts (``ready``), launches, and calls
``finish`` once; ``watch_end`` counts the parameters a backward gave no gradient (FSDP).
``in_order=True`` (DDP, ZeRO-2): groups go strictly in index order, since gradients may
arrive in different orders on different ranks; ``in_order=False`` (FSDP): each as it
completes (autograd leaves the units in the same order on every rank). Hooks live in C++,
unseen by the cycle collector: they and the queue hold the owner weakly, so a dropped
owner is freed at once, and its hooks are removed with its queue.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

import torch

from minidp.comm import p2p, traffic
from minidp.comm.agree import checked, is_checked
from minidp.comm.group import use_group


class CommThread:
    """The one thread that runs what was launched, in submission order (FIFO: every rank
    runs the same collectives in the same order), on its own channel (``p2p.DDP_CHANNEL``:
    a user's collective never pairs with its messages), while autograd computes on (gloo's
    I/O and ``torch.add`` release the GIL). Each task runs in the submitter's group, checked
    mode and traffic counters, which are thread-local."""

    def __init__(self, group) -> None:
        self.group = group
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minidp-comm")
        # Stop the idle worker when the owner (a reducer, a root) is garbage-collected.
        weakref.finalize(self, self._pool.shutdown, wait=False)

    def submit(self, fn: Callable, *args) -> Future:
        """Run ``fn(*args)`` on the thread after everything submitted before it, in the
        submitting thread's checked mode and traffic counters."""
        return self._pool.submit(self._run, fn, args, is_checked(), traffic.open_counters())

    def _run(self, fn: Callable, args: tuple, checked_mode: bool, counters: list):
        with use_group(self.group), p2p.channel(p2p.DDP_CHANNEL), checked(checked_mode):
            with traffic.counting(counters):
                return fn(*args)


class LaunchQueue:
    """Counts each group's gradients, launches complete groups on ``comm``, and calls the
    owner's ``finish`` when all went. ``armed``: a backward is under way."""

    def __init__(
        self, comm, *, counts: Callable, launch: Callable, finish: Callable, in_order: bool
    ) -> None:
        self.comm, self.in_order = comm, in_order
        self._counts, self._launch, self._finish = map(_weakly, (counts, launch, finish))
        self.armed = self.hold = False  # hold: launch nothing before every group is complete
        self.pending, self.arrived, self.futures = [], [], []  # per group (see arm)
        self.handles: dict[int, Any] = {}  # id -> hook handle: removed with this queue
        self._end, self._end_key = [], ()  # watch_end's hook, and its parameters' ids
        weakref.finalize(self, _remove, self.handles)

    def hook(self, params: list[torch.Tensor], on_grad: Callable, keys: Iterable = ()) -> list:
        """After each parameter's gradient is accumulated: ``on_grad(key)`` (``keys``: one per
        parameter; by default its position). ``on_grad`` is the owner's method, held weakly."""
        method, keys = _weakly(on_grad), list(keys) or range(len(params))
        hooks = [partial(_call_weakly, method, k) for k in keys]
        return self.keep([p.register_post_accumulate_grad_hook(h) for p, h in zip(params, hooks)])

    def keep(self, handles: list) -> list:
        """Remove these hook handles with this queue (or at ``remove``)."""
        self.handles.update((id(h), h) for h in handles)
        return handles

    def remove(self, handles: list | None = None) -> None:
        """Remove these hooks now (``None``: every hook this queue holds)."""
        _remove(self.handles, handles)

    def watch_end(self, params: list[torch.Tensor], groups: list[int]) -> None:
        """Once autograd computed every gradient of ``params`` a backward brings (before it
        accumulates the last), each that got none counts as ready for its group ``groups[k]``
        (a group none reached keeps ``arrived[i] == 0``). Re-registered if ``params`` change."""
        key = tuple(map(id, params))
        if key == self._end_key:
            return
        self.remove(self._end)
        self._end_key, self._end = key, []
        if params:
            me = weakref.ref(self)
            hook = torch.autograd.graph.register_multi_grad_hook(
                params, lambda grads: me()._end_of_gradients(grads, groups)
            )
            self._end = self.keep([hook])

    def _end_of_gradients(self, grads: list, groups: list[int]) -> None:
        if not self.armed:
            self.arm()
        for grad, i in zip(grads, groups):
            if grad is None:
                self._count(i, arrived=False)
        self._finish_if_done()  # (no group waits for the last gradient's own hook)

    def arm(self, hold: bool = False) -> None:
        """A new backward: group ``i`` waits for ``counts()[i]`` gradients; groups with none
        (all frozen, or empty) go at once. ``hold=True`` launches nothing before every group
        is complete (DDP's ``overlap=False``)."""
        self.pending = list(self._counts()())  # gradients still to come
        self.arrived = [0] * len(self.pending)  # gradients its hooks brought (not watch_end's)
        self.futures: list[Future | None] = [None] * len(self.pending)  # once launched
        self.next = self.launched = 0  # the lowest group not launched (in order); how many went
        self.hold, self.armed = hold, True
        self._go()

    def ready(self, i: int) -> None:
        """One more gradient of group ``i`` is in (the first of a backward arms the queue)."""
        if not self.armed:
            self.arm()
        self._count(i, arrived=True)
        self._finish_if_done()

    def close(self) -> None:
        """This backward is over: disarm, then the owner's ``finish()`` (a backward that
        ended early: what went is waited for, the rest never goes)."""
        self.armed = False
        self._finish()()

    def _finish_if_done(self) -> None:
        if self.launched == len(self.pending):
            self.close()

    def _count(self, i: int, arrived: bool) -> None:
        self.pending[i] -= 1
        self.arrived[i] += arrived
        if self.pending[i] == 0:
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
        fn = self._launch()(i)
        if fn is None:  # nothing to communicate for this group: done already
            self.futures[i] = Future()
            self.futures[i].set_result(None)
        else:
            self.futures[i] = self.comm.submit(fn)
        self.launched += 1

    def wait(self) -> list:
        """Every launched group's result, in group order (``None`` for a group that did not
        go: a backward that ended early); re-raises the thread's errors."""
        return [None if f is None else f.result() for f in self.futures]


def _weakly(fn: Callable) -> Callable[[], Callable | None]:
    """``fn`` held weakly if it is a bound method (its owner holds the queue)."""
    return weakref.WeakMethod(fn) if hasattr(fn, "__self__") else (lambda: fn)


def _call_weakly(method: Callable, key: Any, _: torch.Tensor) -> None:
    """A gradient hook: the owner's ``on_grad(key)``, unless the owner is gone."""
    if (live := method()) is not None:
        live(key)


def _remove(held: dict, handles: list | None = None) -> None:
    for h in list(held.values()) if handles is None else handles:
        h.remove()
        held.pop(id(h), None)
