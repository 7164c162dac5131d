"""Recording events: ``Recording``, ``span``, ``instant``, ``complete``, ``now_us``.

Test: ``pytest tests/test_trace.py``

Every open ``recording()`` gets every event from any thread; with none open, each call
returns after one test. ``recording()`` (the package's) opens them with :func:`start`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

from minidp import identity
from minidp.trace.chrome import save

_recordings: list[Recording] = []  # open recordings; empty: every call returns at once
lock = threading.Lock()  # guards _recordings, and trace.active while recording() flips it


def now_us() -> float:
    """Microseconds on ``perf_counter`` (CLOCK_MONOTONIC: one time axis for all processes)."""
    return time.perf_counter_ns() / 1000.0


class Recording:
    """Events recorded while a ``recording()`` block was open."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def save(self, path: str | Path) -> Path:
        """Write the events as Chrome trace JSON; returns the path."""
        return save(path, self.events)

    def ranks(self) -> list[int]:
        """The ranks that recorded at least one event, sorted."""
        return sorted({e["pid"] for e in self.events})

    def select(self, name: str | None = None, rank: int | None = None, lane: str | None = None):
        """Events filtered by name / rank / lane, in time order."""
        out = [
            e
            for e in self.events
            if (name is None or e["name"] == name)
            and (rank is None or e["pid"] == rank)
            and (lane is None or e["tid"] == lane)
        ]
        return sorted(out, key=lambda e: e["ts"])


def start(rec: Recording) -> None:
    """Open ``rec``: it receives every event from now on (caller holds :data:`lock`)."""
    _recordings.append(rec)


def stop(rec: Recording) -> bool:
    """Close ``rec``; returns whether any recording is still open (caller holds :data:`lock`)."""
    _recordings.remove(rec)
    return bool(_recordings)


def _emit(name: str, lane: str, rank: int | None, args: dict, **fields) -> None:
    """One event (``fields``: its phase and times) on ``rank``'s track, else this rank's."""
    pid = identity.track_rank() if rank is None else rank
    event = {"name": name, **fields, "pid": pid, "tid": lane, "args": args}
    with lock:
        for rec in _recordings:
            rec.events.append(event)


def instant(name: str, lane: str = "comm", rank: int | None = None, **args) -> None:
    """Record a point event on ``lane`` of this rank's track."""
    if not _recordings:
        return
    _emit(name, lane, rank, args, ph="i", s="t", ts=now_us())


def complete(
    name: str,
    start_us: float,
    end_us: float,
    lane: str = "comm",
    rank: int | None = None,
    **args,
) -> None:
    """Record a duration measured by the caller (``start_us``/``end_us`` from :func:`now_us`),
    for work that starts in one place and ends in another (a bucket's all-reduce)."""
    if not _recordings:
        return
    _emit(name, lane, rank, args, ph="X", ts=start_us, dur=max(end_us - start_us, 0.001))


class _Span:
    __slots__ = ("name", "lane", "rank", "args", "start")

    def __init__(self, name: str, lane: str, rank: int | None, args: dict) -> None:
        self.name, self.lane, self.rank, self.args = name, lane, rank, args

    def __enter__(self) -> None:
        self.start = now_us()

    def __exit__(self, *exc) -> None:
        complete(self.name, self.start, now_us(), self.lane, self.rank, **self.args)


_NOTHING = contextlib.nullcontext()


def span(name: str, lane: str = "compute", rank: int | None = None, **args):
    """Context manager: a duration event covering the block on ``lane`` of this rank's track."""
    if not _recordings:
        return _NOTHING  # shared, allocation-free: the cost of tracing when it is off
    return _Span(name, lane, rank, args)
