"""Record what each rank does, and export it as a Chrome trace (Perfetto, chrome://tracing).

Events: point-to-point sends/receives with their bytes, reduce steps, gradient-ready hooks,
bucket launch/finish, forward/backward spans. One track (``pid``) per rank, one lane
(``tid``) per activity ("compute", "hooks", "comm", ...), so the picture shows
communication overlapping computation.

When nothing is recording, every hook is one attribute test (``if trace.active:``) and
``span`` returns a shared do-nothing context, so tracing costs nothing in normal runs.

Use::

    from minidp import trace
    with trace.recording() as rec:
        ...                                  # run a collective / a training step
    rec.save("step.trace.json")              # open in https://ui.perfetto.dev

Several processes: each rank returns ``rec.events``; merge with ``trace.save(path, a, b)``.

Recording calls (all free when nothing records):

* ``with trace.span("backward", lane="compute"):`` — a duration on this rank's lane;
* ``trace.instant("grad_ready", lane="hooks", param="fc.weight")`` — a point event;
* ``trace.complete("bucket 0", t0, t1, lane="comm")`` — a duration measured elsewhere
  (launched in one thread, finished in another), with ``t0 = trace.now_us()``.

Watching the messages themselves (what the ring demo draws): ``trace.tap(group)`` wraps a
process group so that every send/recv through it is logged with its peer, tag, bytes, and
a copy of the payload — an observer, the collective itself is unchanged::

    log = trace.MessageLog()
    g = trace.tap(minidp.comm.group.resolve(), log, watch=x)   # inside a rank
    minidp.comm.ring_all_reduce(x, group=g, layout="textbook")
    for m in log.sends(): print(m.src, "->", m.dst, m.offset, m.payload)

Test: ``pytest tests/test_trace.py``
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

active = False  # True while at least one recording is open in this process
_recordings: list[Recording] = []
_lock = threading.Lock()

# Lanes drawn in this order inside each rank's track (others follow, alphabetically).
LANE_ORDER = ("compute", "forward", "backward", "hooks", "buckets", "comm", "reduce")


def now_us() -> float:
    """Microseconds on the clock every event uses.

    ``perf_counter`` is CLOCK_MONOTONIC on Linux: shared by every process on the machine,
    so the tracks of several rank processes line up on one time axis.
    """
    return time.perf_counter_ns() / 1000.0


_now_us = now_us  # older name, kept for callers


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
            "ts": now_us(),
            "pid": _rank() if rank is None else rank,
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
    if not active:
        return
    _emit(
        {
            "name": name,
            "ph": "X",
            "ts": start_us,
            "dur": max(end_us - start_us, 0.001),
            "pid": _rank() if rank is None else rank,
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
    if not active:
        return _NOTHING  # shared, allocation-free: the cost of tracing when it is off
    return _Span(name, lane, rank, args)


# ----------------------------------------------------------------------------- export


def _lane_key(lane: str) -> tuple[int, str]:
    return (LANE_ORDER.index(lane) if lane in LANE_ORDER else len(LANE_ORDER), str(lane))


def _flows(events: list[dict]) -> list[dict]:
    """Arrows from each send to the receive that completed it (Perfetto draws them).

    Matching is first-in first-out per (sender, receiver) pair and only between events of
    equal size, which is how gloo delivers messages between two ranks for the collectives
    here; an unmatched event simply gets no arrow.
    """
    sends: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        if e["name"] == "send" and "peer" in e.get("args", {}):
            sends.setdefault((e["pid"], e["args"]["peer"]), []).append(e)
    out, next_id = [], 1
    for e in events:
        if e["name"] != "recv" or "peer" not in e.get("args", {}):
            continue
        queue = sends.get((e["args"]["peer"], e["pid"]))
        if not queue or queue[0]["args"].get("bytes") != e["args"].get("bytes"):
            continue
        s = queue.pop(0)
        common = {"name": "message", "cat": "p2p", "id": next_id}
        out.append({**common, "ph": "s", "ts": s["ts"], "pid": s["pid"], "tid": s["tid"]})
        out.append(
            {**common, "ph": "f", "bp": "e", "ts": e["ts"], "pid": e["pid"], "tid": e["tid"]}
        )
        next_id += 1
    return out


def to_chrome(*event_lists: Iterable[dict], flows: bool = True) -> dict:
    """Merge event lists into a Chrome trace object (``{"traceEvents": [...]}``).

    Times start at 0; each rank is a process named "rank N"; lanes become numbered threads
    named after the lane, in the order of ``LANE_ORDER``.
    """
    events = sorted((e for lst in event_lists for e in lst), key=lambda e: e["ts"])
    t0 = min((e["ts"] for e in events), default=0.0)
    lanes = sorted({e["tid"] for e in events}, key=_lane_key)
    tid = {lane: i + 1 for i, lane in enumerate(lanes)}
    out: list[dict[str, Any]] = []
    for e in events:
        e = {**e, "ts": e["ts"] - t0, "tid": tid[e["tid"]]}
        if flows and e["ph"] == "i" and e["name"] in ("send", "recv"):
            # An arrow binds to the *slice* around its end points; an instant is not one,
            # so messages are exported as 1-microsecond slices.
            e = {k: v for k, v in e.items() if k != "s"} | {"ph": "X", "dur": 1.0}
        out.append(e)
    if flows:
        for f in _flows(events):
            out.append({**f, "ts": f["ts"] - t0, "tid": tid[f["tid"]]})
    for pid in sorted({e["pid"] for e in events}):
        meta = {"ph": "M", "pid": pid}
        out.append({**meta, "name": "process_name", "args": {"name": f"rank {pid}"}})
        out.append({**meta, "name": "process_sort_index", "args": {"sort_index": pid}})
        for lane in sorted({e["tid"] for e in events if e["pid"] == pid}, key=_lane_key):
            out.append({**meta, "tid": tid[lane], "name": "thread_name", "args": {"name": lane}})
            out.append(
                {
                    **meta,
                    "tid": tid[lane],
                    "name": "thread_sort_index",
                    "args": {"sort_index": tid[lane]},
                }
            )
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def save(path: str | Path, *event_lists: list[dict]) -> Path:
    """Merge event lists (one per rank or recording) into one Chrome trace JSON file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_chrome(*event_lists)))
    return path


def load(path: str | Path) -> list[dict]:
    """The duration and instant events of a saved trace (metadata and arrows left out)."""
    data = json.loads(Path(path).read_text())
    return [e for e in data["traceEvents"] if e.get("ph") in ("X", "i")]


# ----------------------------------------------------------------------------- messages


@dataclasses.dataclass
class Message:
    """One send or receive seen through a tapped group.

    ``offset``: element offset of the message's tensor inside the watched tensor, or None
    when the tensor is not part of it (a header, a scratch buffer). ``payload``: a copy of
    the data, taken when the send was posted (sends only).
    """

    kind: str  # "send" or "recv"
    src: int
    dst: int
    tag: int
    numel: int
    nbytes: int
    offset: int | None
    payload: Any
    ts: float
    seq: int  # order of this rank's calls of this kind (0, 1, 2, ...)


class MessageLog:
    """Messages logged by tapped groups (thread-safe; one log may serve every rank)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._lock = threading.Lock()

    def add(self, message: Message) -> None:
        with self._lock:
            self.messages.append(message)

    def sends(self, src: int | None = None, watched: bool = True) -> list[Message]:
        """Sends, in each rank's posting order; ``watched``: only those inside the watched
        tensor (data, not headers)."""
        out = [
            m
            for m in self.messages
            if m.kind == "send"
            and (src is None or m.src == src)
            and (not watched or m.offset is not None)
        ]
        return sorted(out, key=lambda m: (m.src, m.seq))

    def bytes_sent(self, src: int, watched: bool | None = None) -> int:
        """Bytes rank ``src`` sent (``watched``: True data only, False other only, None all)."""
        return sum(
            m.nbytes
            for m in self.messages
            if m.kind == "send"
            and m.src == src
            and (watched is None or (m.offset is not None) == watched)
        )


class TappedGroup:
    """A process group that logs every send/recv and otherwise behaves like ``group``."""

    def __init__(self, group, log: MessageLog, watch=None, copy: bool = True) -> None:
        self._group = group
        self._log = log
        self._watch = watch
        self._copy = copy
        self._seq = {"send": 0, "recv": 0}

    def rank(self) -> int:
        return self._group.rank()

    def size(self) -> int:
        return self._group.size()

    def _offset(self, t) -> int | None:
        w = self._watch
        if w is None:
            return None
        if t.untyped_storage().data_ptr() != w.untyped_storage().data_ptr():
            return None
        return (t.data_ptr() - w.data_ptr()) // t.element_size()

    def _note(self, kind: str, t, src: int, dst: int, tag: int) -> None:
        seq = self._seq[kind]
        self._seq[kind] += 1
        payload = t.detach().clone() if (self._copy and kind == "send") else None
        self._log.add(
            Message(
                kind,
                src,
                dst,
                tag,
                t.numel(),
                t.numel() * t.element_size(),
                self._offset(t),
                payload,
                now_us(),
                seq,
            )
        )

    def send(self, tensors, dst: int, tag: int = 0):
        self._note("send", tensors[0], self.rank(), dst, tag)
        return self._group.send(tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        self._note("recv", tensors[0], src, self.rank(), tag)
        return self._group.recv(tensors, src, tag)

    def __getattr__(self, name: str):  # anything else: the real group's
        return getattr(self._group, name)


def tap(group, log: MessageLog, watch=None, copy: bool = True) -> TappedGroup:
    """Wrap ``group`` so every send/recv through it is logged in ``log``.

    Args:
        group: a process group (``minidp.comm.group.resolve()`` inside a rank).
        log: where messages go; share one log between the ranks of a thread world.
        watch: a tensor whose views the messages are located in (``Message.offset``).
        copy: keep a copy of each sent payload (small tensors: demos and tests).
    """
    return TappedGroup(group, log, watch, copy)
