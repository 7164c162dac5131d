"""The communication thread: runs each launched collective (a bucket's all-reduce, a unit's
reduce-scatter), one after another, while autograd computes on.

Why a thread: the point of DDP's buckets is that the all-reduce of the last layers'
gradients runs *while* autograd still computes the first layers' gradients. minidp's
collectives are blocking Python calls, so they need a thread of their own; the autograd
thread only enqueues work and keeps computing. (On CPU the heavy parts — gloo's socket
I/O and ``torch.add`` — release the GIL, so the two threads really run at once.)

Why ONE thread: minidp collectives number their messages from tag 0 on every call, and
every rank must run the same collectives in the same order. A single worker consuming a
FIFO queue gives both: bucket 0, then bucket 1, ... exactly in launch order, never two
at once. DDP waits for it (end of backward) before its own next collective, such as the
buffer broadcast.

Why its own channel (``p2p.DDP_CHANNEL``): the user may call collectives on the same
group *while* this thread works — an ``autograd.Function`` whose backward all-reduces
(model-parallel layers, gradient statistics). Both would number messages from tag 0 and
pair up with each other across ranks; in a tag space of its own, each stream stays in
order by itself, as torch's single ordered queue per group keeps them.

The thread-local "current group", checked mode and traffic counters of ``minidp.comm`` do
not follow work onto another thread, so each task runs inside ``use_group(group)``, the
submitter's checked mode and the submitter's open ``count_traffic()`` counters: a comm
hook that passes ``group=None`` still reaches DDP's group, in thread worlds too, and a
counter opened around a training step counts the bytes its backward sent from here.

Used by ``launch_queue.py`` (DDP, ZeRO-2, FSDP) and FSDP's all-gathers. Test: ``pytest
tests/test_ddp_overlap.py tests/test_launch_queue.py``
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
        submitting thread's checked mode (``minidp.comm.checked()`` covers DDP's traffic)
        and counted by its open traffic counters."""
        return self._pool.submit(self._run, fn, args, is_checked(), traffic.open_counters())

    def _run(self, fn: Callable, args: tuple, checked_mode: bool, counters: list):
        with use_group(self.group), p2p.channel(p2p.DDP_CHANNEL), checked(checked_mode):
            with traffic.counting(counters):
                return fn(*args)
