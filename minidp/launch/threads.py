"""Thread worlds: ``world_size`` ranks as threads of this process, each with a real gloo group.

Why: starting processes costs a second or more each; a thread world of 4 ranks starts in
milliseconds. Each thread gets its *own* ``ProcessGroupGloo`` (real TCP pairs on
loopback, real gloo send/recv), made the thread's current group, so ``minidp.comm`` calls
without ``group=`` use it. That is what lets property tests run hundreds of worlds.

Limits: threads share the global RNG and autograd state — build models and data before
the threads start, or use explicit ``torch.Generator``s. Official DDP needs a full
``ProcessGroup``; compare against it in real processes (``minidp.launch.spawn``).

A thread cannot be killed. A rank still running at the deadline is stopped where that is
possible: a rank blocked in a collective is freed by aborting the groups, and a rank
running Python code gets an exception raised into it (``RankStopped``, through CPython's
``PyThreadState_SetAsyncExc``), which ends it at its next bytecode. A rank stuck inside
one long C call (``time.sleep``, a big matmul) only sees it when that call returns; until
then it keeps running, and ``run_threads`` warns naming it. Code that may hang belongs in
processes (``spawn(..., deadline=...)`` kills them).

Test: ``pytest tests/test_launch.py -k threads``
"""

from __future__ import annotations

import ctypes
import datetime
import gc
import itertools
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from minidp.comm.agree import checked, is_checked
from minidp.comm.errors import PeerError
from minidp.comm.group import use_group
from minidp.launch.checks import check_timeout, check_world_size
from minidp.launch.errors import Failure, WorkerError

ABORT_WAIT_S = 2.0  # after the deadline and the groups' abort: time to report and return
STOP_WAIT_S = 2.0  # then, after the exception raised into a still-running rank

_worlds = itertools.count()

# torch's flight recorder (its process-wide log of recent collectives) adds a group to a
# shared map on the group's first collective. In torch 2.11 it does so *before* taking its
# lock; a thread world makes several groups whose first collectives start at once, and
# concurrent inserts corrupt the map: lost entries, now and then a segmentation fault.
# 2.13 takes the lock first; 2.8 does not log gloo at all; 2.9, 2.10 and 2.12 are
# untested and included to be safe. There each rank's first collective, a barrier, is
# started under one lock, so the inserts happen one at a time, and all are done before
# any rank's own code runs (the barrier completes only once every rank started it).
_TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
FIRST_COLLECTIVE_RACES = (2, 9) <= _TORCH < (2, 13)
_first_collective = threading.Lock()


def thread_group(store, rank: int, size: int, timeout: datetime.timedelta):
    """A rank thread's own ``ProcessGroupGloo``, ready for the rank's first collective.

    Every rank of the world calls it at about the same time (it returns once all have
    joined). Used by :func:`run_threads` and by the exercise checker's reusable worlds.
    """
    group = dist.ProcessGroupGloo(store, rank, size, timeout)
    if FIRST_COLLECTIVE_RACES:
        with _first_collective:
            first = group.barrier()  # enqueued (and logged) here; gloo's thread runs it
        first.wait()
    return group


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
    world_size = check_world_size("run_threads", world_size)
    timeout = check_timeout("run_threads", timeout)
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
            run_rank(rank)
        except RankStopped:  # stopped at the deadline (reported as stuck), maybe in clean-up
            pass

    def run_rank(rank: int) -> None:
        try:
            groups[rank] = thread_group(store, rank, world_size, td)
            with use_group(groups[rank]), checked(checked_mode):
                results[rank] = fn(rank, world_size, *args)
        except RankStopped:  # the launcher's groups are aborted already: nothing to clean
            raise
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
            _abort(g)  # frees ranks blocked in a collective: they report their error
        _join(threads, stuck, ABORT_WAIT_S)
        give_up = time.monotonic() + STOP_WAIT_S
        alive = [r for r in stuck if threads[r].is_alive()]
        while alive and time.monotonic() < give_up:
            for r in alive:  # again each round: one landing in a finaliser is swallowed
                _raise_in(threads[r], RankStopped)  # stops ranks running Python code
            _join(threads, alive, min(0.25, max(give_up - time.monotonic(), 0.0)))
            alive = [r for r in alive if threads[r].is_alive()]
        if alive:
            warnings.warn(
                f"run_threads: rank(s) {alive} still running "
                f"{ABORT_WAIT_S + STOP_WAIT_S:g}s after the "
                f"{timeout:g}s deadline, inside a call that cannot be interrupted (C code, "
                f"a sleep); a thread cannot be killed, so they keep running (and using a "
                f"core) until that call returns — run code that may hang with "
                f"minidp.launch.spawn(..., deadline=...), which kills processes",
                RuntimeWarning,
                stacklevel=2,
            )
        if not failures:
            failures = [Failure(rank=r, message=f"{timeout:g}s", stuck=True) for r in stuck]
    if failures:
        note = f"(ranks still running at the {timeout:g}s deadline: {stuck})" if stuck else ""
        raise WorkerError(failures, "run_threads", note)
    return results


class RankStopped(BaseException):
    """Raised into a rank thread still running at ``run_threads``' deadline, to end it.

    A ``BaseException`` (like ``KeyboardInterrupt``), so ``except Exception`` in the rank's
    code does not swallow it.
    """


def _join(threads: list[threading.Thread], ranks: list[int], seconds: float) -> None:
    """Join ``threads[r]`` for each rank in ``ranks``, all within ``seconds`` in total."""
    until = time.monotonic() + seconds
    for r in ranks:
        threads[r].join(max(until - time.monotonic(), 0.0))


def _raise_in(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    """Raise ``exc_type`` in ``thread`` at its next bytecode (public CPython C API)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type)
        )


def _abort(pg) -> None:
    if pg is not None and hasattr(pg, "abort"):
        try:
            pg.abort()
        except Exception:
            pass
