"""The Chrome trace format: ``to_chrome``, ``save``, ``load`` (Perfetto, chrome://tracing).

Test: ``pytest tests/test_trace.py``

Events are recorded as Chrome trace events (rank = ``pid``, lane = ``tid``); export starts
time at 0, numbers the lanes, names the tracks "rank N" and adds send -> recv arrows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Lanes drawn in this order inside each rank's track (others follow, alphabetically).
LANE_ORDER = ("compute", "forward", "backward", "hooks", "buckets", "comm", "reduce")


def _lane_key(lane: str) -> tuple[int, str]:
    return (LANE_ORDER.index(lane) if lane in LANE_ORDER else len(LANE_ORDER), str(lane))


def _flows(events: list[dict]) -> list[dict]:
    """Arrows from each send to its receive: first in, first out per pair and size, as gloo."""
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
    """Merge event lists into a Chrome trace object (``{"traceEvents": [...]}``)."""
    events = sorted((e for lst in event_lists for e in lst), key=lambda e: e["ts"])
    t0 = min((e["ts"] for e in events), default=0.0)
    lanes = sorted({e["tid"] for e in events}, key=_lane_key)
    tid = {lane: i + 1 for i, lane in enumerate(lanes)}
    out: list[dict[str, Any]] = []
    for e in events:
        e = {**e, "ts": e["ts"] - t0, "tid": tid[e["tid"]]}
        if flows and e["ph"] == "i" and e["name"] in ("send", "recv"):
            # an arrow binds to a *slice*: messages become 1-microsecond slices
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
