"""Every send/recv through a process group, logged: ``tap``, ``MessageLog``, ``Message``.

Test: ``pytest tests/test_trace.py``

``tap(group, log)`` behaves like ``group`` and logs each message (peer, tag, bytes, place
in a watched tensor, a copy of the payload); the ring demo replays its steps from it::

    log = trace.MessageLog()
    g = trace.tap(minidp.comm.group.resolve(), log, watch=x)   # inside a rank
    minidp.textbook.collectives.ring_all_reduce(x, group=g)    # the book's ring
    for m in log.sends(): print(m.src, "->", m.dst, m.offset, m.payload)
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from minidp.trace.record import now_us


@dataclasses.dataclass
class Message:
    """One send or receive seen through a tapped group. ``offset``: in the watched tensor
    (None: a header, a scratch buffer); ``payload``: a copy (sends only)."""

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
        """Sends, in each rank's posting order; ``watched``: only data, not headers."""
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
    """Wrap ``group`` so every send/recv through it is logged in ``log`` (one log may serve
    every rank); ``watch``: the tensor offsets refer to; ``copy``: keep sent payloads."""
    return TappedGroup(group, log, watch, copy)
