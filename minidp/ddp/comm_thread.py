"""The communication thread: runs each launched bucket's all-reduce, one after another.

Why a thread: the point of DDP's buckets is that the all-reduce of the last layers'
gradients runs *while* autograd still computes the first layers' gradients. minidp's
collectives are blocking Python calls, so they need a thread of their own; the autograd
thread only enqueues work and keeps computing. (On CPU the heavy parts — gloo's socket
I/O and ``torch.add`` — release the GIL, so the two threads really run at once.)

Why ONE thread: minidp collectives number their messages from tag 0 on every call, and
every rank must run the same collectives in the same order. A single worker consuming a
FIFO queue gives both: bucket 0, then bucket 1, ... exactly in launch order, never two
at once. Nothing else may talk on the group while it works; DDP waits for it (end of
backward) before any other collective such as the buffer broadcast.

The thread-local "current group" of ``minidp.comm`` does not follow work onto another
thread, so each task runs inside ``use_group(group)``: a comm hook that passes
``group=None`` still reaches DDP's group, in thread worlds too.

Test: ``pytest tests/test_ddp_overlap.py``
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from minidp.comm.group import use_group


class CommThread:
    """A single worker thread bound to one process group; ``submit`` returns a Future."""

    def __init__(self, group) -> None:
        self.group = group
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minidp-ddp-comm")
        # Stop the idle worker when the owner (the reducer) is garbage-collected.
        weakref.finalize(self, self._pool.shutdown, wait=False)

    def submit(self, fn: Callable, *args) -> Future:
        """Run ``fn(*args)`` on the thread after everything submitted before it."""
        return self._pool.submit(self._run, fn, args)

    def _run(self, fn: Callable, args: tuple):
        with use_group(self.group):
            return fn(*args)
