"""The communication thread: runs each launched collective (a bucket's all-reduce, a unit's
reduce-scatter), one after another, while autograd computes on.

Test: ``pytest tests/test_ddp_overlap.py tests/test_launch_queue.py``

A thread, because the collectives are blocking Python calls (gloo's I/O and ``torch.add``
release the GIL). *One*, consuming a FIFO, so every rank runs the same collectives in the
same order. Its own channel (``p2p.DDP_CHANNEL``), so a user's collective on the same group
never pairs with its messages. Each task runs in the submitter's group, checked mode and
traffic counters, which are thread-local.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from minidp.comm import p2p, traffic
from minidp.comm.agree import checked, is_checked
from minidp.comm.group import use_group


class CommThread:
    """A single worker thread bound to one process group; ``submit`` returns a Future."""

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
