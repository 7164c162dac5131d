"""Record what each rank does, and export it as a Chrome trace (Perfetto, chrome://tracing).

Test: ``pytest tests/test_trace.py``

One track per rank, one lane per activity ("compute", "hooks", "comm", ...): the picture
shows communication overlapping computation. When nothing records, each call below costs
one test (``if trace.active:``)::

    with trace.recording() as rec:
        with trace.span("backward", lane="compute"):              # a duration
            trace.instant("grad_ready", lane="hooks", param="w")  # a point event
        trace.complete("bucket 0", t0, t1, lane="comm")  # measured elsewhere (trace.now_us())
    rec.save("step.trace.json")                           # open in https://ui.perfetto.dev

Several processes' events merge with ``trace.save(path, a, b)`` (``chrome.py``);
``trace.tap`` logs every send/recv of a group (``messages.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from minidp.trace import record
from minidp.trace.chrome import LANE_ORDER, load, save, to_chrome
from minidp.trace.messages import Message, MessageLog, TappedGroup, tap
from minidp.trace.record import (
    Recording,
    complete,
    instant,
    now_us,
    span,
)

# read by the hot paths (``if trace.active:``), so flipped here: a copy would go stale
active = False  # True while at least one recording is open in this process


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Record events from every thread of this process while the block runs."""
    global active
    rec = Recording()
    with record.lock:  # the flag and the list of open recordings change together
        record.start(rec)
        active = True
    try:
        yield rec
    finally:
        with record.lock:
            active = record.stop(rec)


__all__ = [
    "LANE_ORDER",
    "Message",
    "MessageLog",
    "Recording",
    "TappedGroup",
    "active",
    "complete",
    "instant",
    "load",
    "now_us",
    "recording",
    "save",
    "span",
    "tap",
    "to_chrome",
]
