"""Record what each rank does, and export it as a Chrome trace (Perfetto, chrome://tracing).

Events: point-to-point sends/receives with their bytes, reduce steps, gradient-ready hooks,
bucket launch/finish, forward/backward spans. One track (``pid``) per rank, one lane
(``tid``) per activity, so the picture shows communication overlapping computation.

When nothing is recording, every hook is one attribute test (``if trace.active:``), so
tracing costs nothing in normal runs.

Use::

    from minidp import trace
    with trace.recording() as rec:
        ...                                  # run a collective / a training step
    rec.save("step.trace.json")              # open in https://ui.perfetto.dev

Several processes: each rank returns ``rec.events``; merge with ``trace.save(path, a, b)``.

Test: ``pytest tests/test_trace.py``
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

active = False  # True while at least one recording is open in this process
_recordings: list[Recording] = []
_lock = threading.Lock()


def _now_us() -> float:
    # CLOCK_MONOTONIC on Linux: shared by every process on the machine, so the tracks of
    # several ranks line up on one time axis.
    return time.perf_counter_ns() / 1000.0


def _rank() -> int:
    from minidp.comm import group

    try:
        return group.get_rank()
    except RuntimeError:
        return 0


class Recording:
    """Events recorded while a ``recording()`` block was open."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def save(self, path: str | Path) -> Path:
        """Write the events as Chrome trace JSON; returns the path."""
        return save(path, self.events)


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Record events from every thread of this process while the block runs."""
    global active
    rec = Recording()
    with _lock:
        _recordings.append(rec)
        active = True
    try:
        yield rec
    finally:
        with _lock:
            _recordings.remove(rec)
            active = bool(_recordings)


def _emit(event: dict) -> None:
    with _lock:
        for rec in _recordings:
            rec.events.append(event)


def instant(name: str, lane: str = "comm", rank: int | None = None, **args) -> None:
    """Record a point event on ``lane`` of this rank's track."""
    if not active:
        return
    _emit(
        {
            "name": name,
            "ph": "i",
            "s": "t",
            "ts": _now_us(),
            "pid": _rank() if rank is None else rank,
            "tid": lane,
            "args": args,
        }
    )


@contextlib.contextmanager
def span(name: str, lane: str = "compute", rank: int | None = None, **args) -> Iterator[None]:
    """Record a duration event covering the block on ``lane`` of this rank's track."""
    if not active:
        yield
        return
    start = _now_us()
    try:
        yield
    finally:
        _emit(
            {
                "name": name,
                "ph": "X",
                "ts": start,
                "dur": max(_now_us() - start, 0.001),
                "pid": _rank() if rank is None else rank,
                "tid": lane,
                "args": args,
            }
        )


def save(path: str | Path, *event_lists: list[dict]) -> Path:
    """Merge event lists (one per rank or recording) into one Chrome trace JSON file."""
    events = [e for lst in event_lists for e in lst]
    t0 = min((e["ts"] for e in events), default=0.0)
    out = []
    for e in sorted(events, key=lambda e: e["ts"]):
        out.append({**e, "ts": e["ts"] - t0})
    for pid in sorted({e["pid"] for e in events}):
        out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"rank {pid}"}})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": out, "displayTimeUnit": "ms"}))
    return path
