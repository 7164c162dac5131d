"""Real worlds of ranks: one process per rank, each in ``torch.distributed``'s default group.

Test: ``pytest tests/test_launch.py``

``spawn(main, 4)`` runs ``main(rank, world_size)`` on 4 processes; ``ProcessWorld(4)``
keeps them for many ``run`` calls. Children join the parent's ``TCPStore`` with torchrun's
variables set. A failing rank raises :class:`WorkerError` naming the root cause, and every
rank is killed; ranks may start DataLoader workers (non-daemon, as ``torch``'s spawn), and
nothing outlives the launcher.
"""

from __future__ import annotations

import datetime
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing import util as mp_util
from multiprocessing.connection import wait as wait_any
from typing import Any

import torch.distributed as dist

from minidp.launch import forkserver
from minidp.launch.checks import check_importable, check_main_guard, check_timeout, check_world_size
from minidp.launch.errors import Failure, WorkerError
from minidp.launch.leftovers import forked_by_server, is_running, kill_descendants
from minidp.launch.rank import worker

GRACE_S = 1.0  # after the first failure, how long to wait for the other ranks' reports
STARTUP_S = 120.0  # deadline for the rank processes to start and join the group
_starting = threading.Lock()  # see ProcessWorld.__init__


def _kill(pids) -> None:
    """SIGKILL each process and everything it started (children first)."""
    for pid in pids:
        kill_descendants(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _kill_ranks(procs: list) -> None:
    """SIGKILL each live rank and everything it started."""
    _kill([p.pid for p in procs if p.is_alive()])


class ProcessWorld:
    """``world_size`` long-lived rank processes that run functions on request. ``backend``:
    "gloo" (CPU) or "nccl" (one GPU per rank); ``timeout``: seconds a collective may wait."""

    def __init__(self, world_size: int, backend: str = "gloo", timeout: float = 60.0) -> None:
        world_size = check_world_size("ProcessWorld", world_size)
        timeout = check_timeout("ProcessWorld", timeout)
        check_main_guard("ProcessWorld")
        self.world_size = world_size
        self.timeout = timeout
        self.broken = False
        self._conns: list = []
        self._procs: list = []
        self._store = dist.TCPStore(
            "127.0.0.1",
            0,
            world_size,
            True,
            datetime.timedelta(seconds=timeout),
            wait_for_workers=False,
        )  # parent-held rendezvous server; its port is free by construction
        # killed with the world, or at exit (before multiprocessing joins them forever)
        mp_util.Finalize(self, _kill_ranks, args=(self._procs,), exitpriority=10)
        ctx = forkserver.context()
        with _starting:  # one world's ranks forked at a time: a new child of the server is ours
            before = forked_by_server()
            try:
                for rank in range(world_size):
                    parent_end, child_end = ctx.Pipe()
                    p = ctx.Process(
                        target=worker,
                        args=(rank, world_size, self._store.port, backend, timeout, child_end,
                              os.getpid(), dict(os.environ)),
                        name=f"minidp-rank{rank}",
                        daemon=False,  # like torch's mp.spawn: a rank may start DataLoader workers
                    )  # fmt: skip
                    p.start()
                    child_end.close()
                    self._conns.append(parent_end)
                    self._procs.append(p)
            except BaseException:
                # Ctrl-C inside p.start() can land after the server forked the rank and before
                # its pid reached us: that rank is in no list, so find it among the server's
                strays = forked_by_server() - before - {p.pid for p in self._procs}
                _kill(strays)
                deadline = time.monotonic() + 5.0  # a killed process takes a moment to go
                while any(map(is_running, strays)) and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.close(kill=True)
                raise
        try:  # start-up (importing torch) must not fail for a short collective timeout
            self._collect("ProcessWorld start-up", max(timeout, STARTUP_S))
        except BaseException:  # Ctrl-C in a notebook included: no rank may outlive it
            self.close(kill=True)
            raise

    def run(self, fn: Callable[..., Any], *args, timeout: float | None = None) -> list:
        """Run ``fn(rank, world_size, *args)`` (picklable) on every rank; results in rank
        order. ``timeout``: a deadline for the whole call."""
        if self.broken:
            raise RuntimeError("ProcessWorld: this world already failed; start a new one")
        if timeout is not None:
            check_timeout("ProcessWorld.run", timeout)
        check_importable("spawn", fn)
        try:
            payload = pickle.dumps((fn, args))
        except Exception as exc:
            raise TypeError(
                f"spawn: fn and args must be picklable to reach the rank processes, but "
                f"{getattr(fn, '__qualname__', fn)!r} is not ({exc}). Hint: define fn at module "
                "level (not a lambda or a nested function)"
            ) from exc
        try:
            for conn in self._conns:
                conn.send_bytes(payload)
            return self._collect("spawn", timeout)
        except BaseException:  # a rank failed (already stopped), or Ctrl-C here
            self.close(kill=True)
            raise

    def _collect(self, launcher: str, timeout: float | None) -> list:
        results: list[Any] = [None] * self.world_size
        pending = set(range(self.world_size))
        failures: list[Failure] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        first_failure_at = None
        while pending:
            now = time.monotonic()
            limits = [t for t in (deadline, first_failure_at and first_failure_at + GRACE_S) if t]
            wait_s = None if not limits else max(min(limits) - now, 0.0)
            ready = wait_any(
                [self._conns[r] for r in pending] + [self._procs[r].sentinel for r in pending],
                timeout=wait_s,
            )
            if not ready:
                break  # deadline or grace period over
            for r in sorted(pending):
                conn, proc = self._conns[r], self._procs[r]
                kind = None
                if conn in ready:
                    try:
                        kind, value = conn.recv()
                    except (EOFError, OSError):  # the pipe closed: the process is dying
                        proc.join(2.0)
                        kind, value = "dead", None
                    if kind == "ok" or kind == "ready":
                        results[r] = value
                        pending.discard(r)
                        continue
                    if kind == "error":
                        exc_type, message, tb, bystander = value
                        failures.append(
                            Failure(r, exc_type, message, tb, None, bystander, len(failures))
                        )
                        pending.discard(r)
                        continue
                if (conn in ready or proc.sentinel in ready) and not proc.is_alive():
                    proc.join()
                    failures.append(Failure(r, exitcode=proc.exitcode, order=len(failures)))
                    pending.discard(r)
                elif kind == "dead":  # pipe closed but the process will not exit
                    failures.append(
                        Failure(r, "RuntimeError", "closed its pipe", order=len(failures))
                    )
                    pending.discard(r)
            if failures and first_failure_at is None:
                first_failure_at = time.monotonic()
        if failures or pending:
            self.close(kill=True)
            if not failures:  # nobody raised: the whole call outlived its deadline
                failures = [
                    Failure(r, message=f"{timeout:g}s", stuck=True) for r in sorted(pending)
                ]
                pending = set()
            note = f"(ranks stopped while still running: {sorted(pending)})" if pending else ""
            raise WorkerError(failures, launcher, note)
        return results

    def close(self, kill: bool = False) -> None:
        """Stop every rank (politely, or at once with ``kill``) and reap the processes."""
        self.broken = True
        for conn in self._conns:
            if not kill:
                try:
                    conn.send(None)
                except OSError:
                    pass
        if kill:
            _kill_ranks(self._procs)
        for p in self._procs:
            p.join(5.0)
            if p.is_alive():
                _kill_ranks([p])
                p.join()
        for conn in self._conns:
            conn.close()
        self._conns = []

    def __enter__(self) -> ProcessWorld:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._conns:
            self.close(kill=exc_type is not None)  # on an error, do not wait for busy ranks


def spawn(
    fn: Callable[..., Any],
    world_size: int,
    *args,
    backend: str = "gloo",
    timeout: float = 60.0,
    deadline: float | None = None,
) -> list:
    """Start ``world_size`` rank processes, run ``fn(rank, world_size, *args)``, return results.
    ``timeout``: a collective's limit, ``deadline`` the run's (s). Raises :class:`WorkerError`."""
    world_size = check_world_size("spawn", world_size)
    timeout = check_timeout("spawn", timeout)
    if deadline is not None:
        check_timeout("spawn", deadline, "deadline")
    check_importable("spawn", fn)
    check_main_guard("spawn")
    with ProcessWorld(world_size, backend=backend, timeout=timeout) as world:
        return world.run(fn, *args, timeout=deadline)
