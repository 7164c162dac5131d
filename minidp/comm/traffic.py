"""Count the bytes and messages each rank sends and receives.

Test: ``pytest tests/test_collectives.py -k traffic``

Traffic per rank separates the parameter server from the ring; measure it::

    with minidp.comm.count_traffic() as t:
        minidp.comm.ring_all_reduce(x)
    print(t.sent_bytes, t.recv_bytes, t.sent_msgs, t.recv_msgs)

Per thread; a communication thread counts into the submitter's open counters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator

_local = threading.local()  # per-thread stack of open counters (rank-local)
_lock = threading.Lock()  # a counter may be fed by a rank's thread and its comm thread


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


def open_counters() -> list[Traffic]:
    """The counters open on this thread now (to be carried onto another thread)."""
    return list(getattr(_local, "stack", ()))


@contextlib.contextmanager
def counting(counters: list[Traffic]) -> Iterator[None]:
    """Count this thread's messages into ``counters`` too while the block runs."""
    stack = _local.__dict__.setdefault("stack", [])
    stack.extend(counters)
    try:
        yield
    finally:
        del stack[len(stack) - len(counters) :]


def add(kind: str, nbytes: int, messages: int = 1) -> None:
    """Record ``messages`` messages of ``nbytes`` in all (``kind`` is "send" or "recv") on
    open counters (``messages=0``: more bytes of a message counted already)."""
    stack = getattr(_local, "stack", None)
    if not stack:
        return
    with _lock:
        for counter in stack:
            if kind == "send":
                counter.sent_bytes += nbytes
                counter.sent_msgs += messages
            else:
                counter.recv_bytes += nbytes
                counter.recv_msgs += messages
