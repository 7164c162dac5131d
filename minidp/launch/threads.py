"""Thread worlds: ``world_size`` ranks as threads of this process, each with a real gloo group.

Why: starting processes costs a second or more each; a thread world of 4 ranks starts in
milliseconds. Each thread gets its *own* ``ProcessGroupGloo`` (real TCP pairs on
loopback, real gloo send/recv), made the thread's current group, so ``minidp.comm`` calls
without ``group=`` use it. That is what lets property tests run hundreds of worlds.

Limits: threads share the global RNG and autograd state — build models and data before
the threads start, or use explicit ``torch.Generator``s. Official DDP needs a full
``ProcessGroup``; compare against it in real processes (``minidp.launch.spawn``).

Test: ``pytest tests/test_launch.py -k threads``
"""

from __future__ import annotations

import datetime
import gc
import itertools
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from minidp.comm.agree import checked, is_checked
from minidp.comm.errors import PeerError
from minidp.comm.group import use_group
from minidp.launch.errors import Failure, WorkerError

_worlds = itertools.count()


def run_threads(fn: Callable[..., Any], world_size: int, *args, timeout: float = 60.0) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` threads; results in rank order.

    Args:
        fn: called once per rank with its own current gloo group.
        world_size: number of ranks (>= 1).
        timeout: seconds any single send/recv may wait, and the deadline for the whole run.

    Raises:
        WorkerError: a rank raised or the run outlived ``timeout``; names the first failing
            rank with its traceback. The failing rank's group is aborted at once, so ranks
            waiting on it fail within milliseconds instead of at the timeout.
    """
    if world_size < 1:
        raise ValueError(f"run_threads: world_size must be >= 1, got {world_size}")
    store = dist.HashStore()  # rendezvous for this world only
    results: list[Any] = [None] * world_size
    failures: list[Failure] = []
    groups: list[Any] = [None] * world_size
    lock = threading.Lock()
    order = itertools.count()
    td = datetime.timedelta(seconds=timeout)
    name = f"minidp-world{next(_worlds)}"

    checked_mode = is_checked()  # the caller's checked mode carries into every rank thread

    def worker(rank: int) -> None:
        try:
            groups[rank] = dist.ProcessGroupGloo(store, rank, world_size, td)
            with use_group(groups[rank]), checked(checked_mode):
                results[rank] = fn(rank, world_size, *args)
        except BaseException as exc:  # report everything, including KeyboardInterrupt
            failure = Failure(
                rank=rank,
                exc_type=type(exc).__name__,
                message=str(exc),
                traceback=traceback.format_exc(),
                bystander=isinstance(exc, PeerError),
            )
            with lock:
                failure.order = next(order)
                failures.append(failure)
        else:
            return
        # Failed: close this rank's connections so peers blocked on it fail at once with
        # "connection closed" instead of waiting for the timeout. Here, after the except
        # block, the exception's frames are gone; what may still hold the group are
        # wrappers in reference cycles (DDP), which the collection frees.
        _abort(groups[rank])
        groups[rank] = None
        gc.collect()

    threads = [
        threading.Thread(target=worker, args=(r,), name=f"{name}-rank{r}", daemon=True)
        for r in range(world_size)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0.0))
    stuck = [r for r, t in enumerate(threads) if t.is_alive()]
    if stuck:
        for g in groups:
            _abort(g)
        for t in threads:
            t.join(2.0)
        if not failures:
            failures = [Failure(rank=r, message=f"{timeout:g}s", stuck=True) for r in stuck]
    if failures:
        note = f"(ranks still running at the {timeout:g}s deadline: {stuck})" if stuck else ""
        raise WorkerError(failures, "run_threads", note)
    return results


def _abort(pg) -> None:
    if pg is not None and hasattr(pg, "abort"):
        try:
            pg.abort()
        except Exception:
            pass
