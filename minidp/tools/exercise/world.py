"""A thread world that stays up across cases and never lets a learner's bug hang the checker.

``minidp.launch.run_threads`` starts a world per call; the checker runs hundreds of small
cases, so here ``world_size`` rank threads (each with its own real gloo group) wait for
jobs and run one case after another. A job gets a deadline: when it passes, the checker
looks at where each unfinished rank *is* (its innermost frame in the learner's file, with
the loop counters there), aborts the groups and reports that, so a deadlock or a missing
send ends in seconds with "rank 1 is waiting at line 23: recv(...) (step=0)".

A world in which anything failed is thrown away (unmatched messages may still be in
flight); the sandbox starts a fresh one for the next case. The judge computes torch's
answers on these worlds too, where torch's component takes a thread rank's group.

Test: ``pytest tests/test_exercises.py -k deadlock``
"""

from __future__ import annotations

import datetime
import linecache
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

from minidp.comm.errors import PeerError
from minidp.comm.group import use_group
from minidp.launch.threads import thread_group

GRACE_S = 0.4  # after a rank raised, how long the others get to finish or fail too


@dataclass
class Run:
    """The outcome of one job on every rank."""

    values: list[Any]  # per rank: the job's return value (None if it raised or is stuck)
    errors: dict[int, BaseException] = field(default_factory=dict)  # rank -> exception
    stuck: dict[int, str] = field(default_factory=dict)  # rank -> where it was at the deadline

    @property
    def ok(self) -> bool:
        return not self.errors and not self.stuck

    def root_error(self) -> tuple[int, BaseException] | None:
        """The first rank's own error (not a bystander's 'peer lost'), else any."""
        own = {r: e for r, e in self.errors.items() if not isinstance(e, PeerError)}
        pick = own or self.errors
        return min(pick.items()) if pick else None


class ThreadWorld:
    """``size`` rank threads with real gloo groups, running jobs ``job(rank, size, group)``."""

    def __init__(self, size: int, timeout: float) -> None:
        """``timeout``: gloo's own per-message timeout; set it just past the job deadline."""
        self.size = size
        self.timeout = timeout
        self.broken = False
        store = dist.HashStore()
        td = datetime.timedelta(seconds=timeout)
        self._inbox: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(size)]
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.groups: list[Any] = [None] * size
        self._threads = [
            threading.Thread(target=self._serve, args=(r, store, td), daemon=True)
            for r in range(size)
        ]
        for t in self._threads:
            t.start()
        for _ in range(size):  # every group connected (or failed) before the first job
            rank, ok, value = self._outbox.get(timeout=timeout)
            if not ok:
                self.close()
                raise RuntimeError(f"exercise world: rank {rank} could not start: {value}")

    def _serve(self, rank: int, store, td) -> None:
        try:
            self.groups[rank] = thread_group(store, rank, self.size, td)
        except Exception as exc:
            self._outbox.put((rank, False, exc))
            return
        self._outbox.put((rank, True, None))
        with use_group(self.groups[rank]):
            while (job := self._inbox[rank].get()) is not None:
                try:
                    self._outbox.put((rank, True, job(rank, self.size, self.groups[rank])))
                except BaseException as exc:  # the learner's code may raise anything
                    _abort(self.groups[rank])  # peers waiting on me fail now, not at timeout
                    self._outbox.put((rank, False, exc))

    def run(self, job: Callable[[int, int, Any], Any], deadline: float, focus: str = "") -> Run:
        """Run ``job`` on every rank; give up ``deadline`` seconds after the start.

        ``focus``: the learner's file — where a stuck rank is reported from.
        """
        if self.broken:
            raise RuntimeError("exercise world: already broken; start a new one")
        for box in self._inbox:
            box.put(job)
        run = Run(values=[None] * self.size)
        pending = set(range(self.size))
        end = time.monotonic() + deadline
        while pending:
            try:
                rank, ok, value = self._outbox.get(timeout=max(end - time.monotonic(), 0.0))
            except queue.Empty:
                break
            pending.discard(rank)
            if ok:
                run.values[rank] = value
            else:
                run.errors[rank] = value
                end = min(end, time.monotonic() + GRACE_S)  # peers get a moment to report
        for rank in sorted(pending):
            run.stuck[rank] = where(self._threads[rank], focus)
        if not run.ok:  # the next case starts a fresh world now; join this one's ranks later
            self.close(failed=True, wait=False)
        return run

    def close(self, failed: bool = False, wait: bool = True) -> None:
        """Stop the rank threads and (``wait``) wait for them.

        After a failure the groups are aborted first, so ranks waiting on a peer fail
        now. A rank blocked inside gloo is not woken by abort; gloo's own timeout (just past
        the job deadline) ends it, so :meth:`join` waits that long: a thread left blocked in
        C++ aborts the interpreter at exit. ``wait=False`` leaves that to a later
        :meth:`join` (the checker joins every discarded world once, at the end, instead of
        paying a gloo timeout per failing case). A rank spinning in the learner's Python is
        left behind (daemon).
        """
        self.broken = True
        if failed:
            for g in self.groups:
                _abort(g)
        for box in self._inbox:
            box.put(None)
        self._join_by = time.monotonic() + self.timeout + 1.0
        if wait:
            self.join()
        self.groups = [None] * self.size  # destroy the groups here, not at interpreter exit

    def join(self) -> None:
        """Wait for the rank threads of a closed world, until gloo's timeout has ended any
        still blocked in it."""
        for t in self._threads:
            t.join(max(self._join_by - time.monotonic(), 0.0))


def where(thread: threading.Thread, focus: str) -> str:
    """Where ``thread`` is now: its innermost frame in ``focus`` (else its innermost frame)."""
    frame = sys._current_frames().get(thread.ident)
    innermost = frame
    while frame is not None and focus and frame.f_code.co_filename != focus:
        frame = frame.f_back
    frame = frame or innermost
    if frame is None:
        return "finished"
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    counters = ", ".join(
        f"{k}={v}" for k, v in frame.f_locals.items() if type(v) is int and not k.startswith("_")
    )
    return f"line {frame.f_lineno}: {code}" + (f"  ({counters})" if counters else "")


def _abort(group) -> None:
    if group is not None and hasattr(group, "abort"):
        try:
            group.abort()
        except Exception:
            pass
