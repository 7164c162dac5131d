"""Recording events: ``Recording``, ``span``, ``instant``, ``complete``, ``now_us``.

Every open ``recording()`` receives every event emitted by any thread of this process;
when none is open, each call returns after one test of the list of open recordings.
``recording()`` itself is the package's (``minidp/trace/__init__.py``): it opens and
closes recordings here with :func:`start`/:func:`stop` and flips ``trace.active``, the
flag the hot paths read, so this module never imports its own package.

    from minidp import trace
    with trace.recording() as rec:
        with trace.span("backward", lane="compute"):
            ...
    rec.save("step.trace.json")

Test: ``pytest tests/test_trace.py``
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
    """Microseconds on the clock every event uses.

    ``perf_counter`` is CLOCK_MONOTONIC on Linux: shared by every process on the machine,
    so the tracks of several rank processes line up on one time axis.
    """
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


def _emit(event: dict) -> None:
    with lock:
        for rec in _recordings:
            rec.events.append(event)


def instant(name: str, lane: str = "comm", rank: int | None = None, **args) -> None:
    """Record a point event on ``lane`` of this rank's track."""
    if not _recordings:
        return
    _emit(
        {
            "name": name,
            "ph": "i",
            "s": "t",
            "ts": now_us(),
            "pid": identity.track_rank() if rank is None else rank,
            "tid": lane,
            "args": args,
        }
    )


def complete(
    name: str,
    start_us: float,
    end_us: float,
    lane: str = "comm",
    rank: int | None = None,
    **args,
) -> None:
    """Record a duration measured by the caller (``start_us``/``end_us`` from :func:`now_us`).

    For work that starts in one place and ends in another — a bucket all-reduce launched
    by a gradient hook and waited for at the end of backward.
    """
    if not _recordings:
        return
    _emit(
        {
            "name": name,
            "ph": "X",
            "ts": start_us,
            "dur": max(end_us - start_us, 0.001),
            "pid": identity.track_rank() if rank is None else rank,
            "tid": lane,
            "args": args,
        }
    )


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
