"""Thread worlds: ``world_size`` ranks as threads of this process, each with a real gloo group.

Test: ``pytest tests/test_launch.py -k threads``

Fast to start (for property tests); each thread's own ``ProcessGroupGloo`` is its current
group. Threads share the RNG and autograd state, and torch's DDP needs processes. A thread
cannot be killed: at the deadline the groups are aborted and ``RankStopped`` is raised
into ranks running Python; one inside a long C call runs on, with a warning.
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

# torch 2.11's flight recorder registers a group before taking its lock, so concurrent
# first collectives corrupt its map (fixed in 2.13; 2.8 does not log gloo; 2.9-2.12 all
# guarded, to be safe): there each rank's first collective, a barrier, starts under one lock.
_TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
FIRST_COLLECTIVE_RACES = (2, 9) <= _TORCH < (2, 13)
_first_collective = threading.Lock()


def thread_group(store, rank: int, size: int, timeout: datetime.timedelta):
    """A rank thread's own ``ProcessGroupGloo``, returned once every rank has joined."""
    group = dist.ProcessGroupGloo(store, rank, size, timeout)
    if FIRST_COLLECTIVE_RACES:
        with _first_collective:
            first = group.barrier()  # enqueued (and logged) here; gloo's thread runs it
        first.wait()
    return group


def run_threads(fn: Callable[..., Any], world_size: int, *args, timeout: float = 60.0) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` threads; results in rank order.
    ``timeout``: a send/recv's limit and the run's deadline. Raises :class:`WorkerError`."""
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
        # Failed: close this rank's connections so peers blocked on it fail at once. After
        # the except block only reference cycles (DDP) may still hold the group: collect.
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
    """Raised into a rank still running at the deadline; ``except Exception`` cannot catch it."""


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
