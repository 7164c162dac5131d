"""Count the bytes and messages each rank sends and receives.

Why: the one number that separates the parameter server from the ring is *traffic per
rank*. With ``n`` ranks and ``S`` bytes, the parameter server's root receives and sends
``(n-1)·S``; every ring rank sends ``2(n-1)/n·S`` whatever ``n`` is. This module lets a
lesson or a benchmark measure that instead of asserting it::

    with minidp.comm.count_traffic() as t:
        minidp.comm.ring_all_reduce(x)
    print(t.sent_bytes, t.recv_bytes, t.sent_msgs, t.recv_msgs)

Counters are per thread, so in a thread world each rank-thread counts its own traffic.
The other side of that: what a rank's *communication thread* sends (DDP's bucket
all-reduces, FSDP's gathers and reduce-scatters) is not seen by a counter opened on the
rank's own thread. FSDP keeps its own running total (``minidp.fsdp.traffic``), and
``minidp.zero.stages.step_traffic`` uses it.
Counting is a few integer additions per message; nothing is recorded when no counter is
open.

Test: ``pytest tests/test_collectives.py -k traffic``
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator

_local = threading.local()  # per-thread stack of open counters (rank-local)


@dataclasses.dataclass
class Traffic:
    """Bytes and messages moved by this rank while the counter was open."""

    sent_bytes: int = 0
    recv_bytes: int = 0
    sent_msgs: int = 0
    recv_msgs: int = 0


@contextlib.contextmanager
def count_traffic() -> Iterator[Traffic]:
    """Open a traffic counter for this rank (nestable)."""
    stack = _local.__dict__.setdefault("stack", [])
    counter = Traffic()
    stack.append(counter)
    try:
        yield counter
    finally:
        stack.remove(counter)


def add(kind: str, nbytes: int) -> None:
    """Record one message of ``nbytes`` (``kind`` is "send" or "recv") on open counters."""
    for counter in getattr(_local, "stack", ()):
        if kind == "send":
            counter.sent_bytes += nbytes
            counter.sent_msgs += 1
        else:
            counter.recv_bytes += nbytes
            counter.recv_msgs += 1
