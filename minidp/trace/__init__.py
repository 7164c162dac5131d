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

The package, one concept per file:

* ``record.py`` — ``Recording``, ``span``, ``instant``, ``complete``, ``now_us``
  (``recording()`` is here, beside the ``active`` flag it flips);
* ``chrome.py`` — ``to_chrome``, ``save``, ``load``: the Chrome trace JSON format;
* ``messages.py`` — ``tap``, ``MessageLog``, ``Message``: every send/recv of a group.

Test: ``pytest tests/test_trace.py``
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

# The on/off switch lives here, on the package, because that is where the hot paths read
# it (``if trace.active:`` in send/recv and the DDP hooks), so ``recording()`` lives here
# too, to flip it — a copy in a submodule would go stale for those readers.
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
