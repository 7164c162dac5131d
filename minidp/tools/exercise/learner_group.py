"""The group a learner's function gets on a thread rank: send and recv, nothing else.

A thread rank's real group is a ``ProcessGroupGloo`` with every collective on it
(``group.allreduce``...): handed over as it is, a ring all-reduce "solution" could call
gloo's own all-reduce and pass. :class:`LearnerGroup` wraps it and lets through only what
the exercises allow — ``rank()``, ``size()``, ``send``/``recv`` (what ``minidp.comm.p2p``
and every minidp collective are built from) — and refuses everything else with an error
that says so. While the learner's function runs it is also the thread's current group, so
``minidp.comm`` calls without ``group=`` get it too.

On the way it checks what gloo cannot explain:

* every message is matched with its other end (:class:`PostOffice`, shared by the ranks
  of one case: gloo pairs sends and receives per (sender, receiver, tag) in order, and so
  does it). A receive buffer of another dtype or size than what is sent raises on the
  rank that posts second, naming both ends — before gloo sees it and aborts the process;
* a started ``isend``/``irecv`` that was never waited for is an error when the function
  returns (the tensor may change before it is sent, or be read before it arrives);
* the payload bytes and messages each rank sent, and apart from them the header messages
  (tag >= ``HEADER_TAG``) that minidp's own collectives exchange before any data: the
  judge holds them to what the exercise's algorithm must send (``Exercise.traffic``).

Test: ``pytest tests/test_exercise_guards.py``
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import torch

from minidp.comm.agree import HEADER_TAG
from minidp.comm.group import use_group

ALLOWED = ("rank", "size", "send", "recv")


class RefusedCall(RuntimeError):
    """The learner's code called something the exercise does not allow."""


class MessageMismatch(Exception):
    """A send and its receive disagree on dtype or size. (Not a RuntimeError: ``p2p``
    would read it as the backend's and rewrap it.)"""


class UnwaitedMessage(Exception):
    """An ``isend``/``irecv`` was started and never waited for."""


def _what(t: torch.Tensor) -> str:
    """``float64, 3 elements (24 bytes)``: one end of a message."""
    dtype, n = str(t.dtype).replace("torch.", ""), t.numel()
    return f"{dtype}, {n} elements ({n * t.element_size()} bytes)"


class PostOffice:
    """Both ends of every message of one case, matched in order per (src, dst, tag)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[tuple, deque] = defaultdict(deque)  # key -> [(kind, dtype, numel)]

    def post(self, kind: str, src: int, dst: int, tag: int, tensor: torch.Tensor) -> None:
        """Record one end; raise :class:`MessageMismatch` if the other end disagrees."""
        key = (src, dst, tag)
        with self._lock:
            queue = self._waiting[key]
            if queue and queue[0][0] != kind:  # the other end is already posted: compare
                _, dtype, numel, text = queue.popleft()
                if numel == tensor.numel() and (dtype == tensor.dtype or numel == 0):
                    return  # (an empty message carries no bytes: its dtype cannot matter)
                send_t, recv_t = (text, _what(tensor)) if kind == "recv" else (_what(tensor), text)
                raise MessageMismatch(_mismatch(src, dst, send_t, recv_t, dtype != tensor.dtype))
            queue.append((kind, tensor.dtype, tensor.numel(), _what(tensor)))


def _mismatch(src: int, dst: int, sent: str, room: str, dtype_differs: bool) -> str:
    if dtype_differs:
        hint = (
            "the receive buffer has another dtype than the tensor sent: make buffers with "
            "torch.empty_like(the chunk) or dtype=tensor.dtype — torch.empty(n) is float32"
        )
    else:
        hint = (
            "with numel % world != 0 the chunks differ in length: at every step send and "
            "receive the *same* chunk index, into a buffer of that chunk's size"
        )
    what = "dtypes" if dtype_differs else "sizes"
    return (
        f"message {what} differ: rank {src} sends {sent} to rank {dst}, which receives it "
        f"into {room}. Hint: {hint}."
    )


class _Tracked:
    """A started send/recv; remembers whether anyone waited for it."""

    __slots__ = ("work", "kind", "peer", "waited")

    def __init__(self, work, kind: str, peer: int) -> None:
        self.work, self.kind, self.peer, self.waited = work, kind, peer, False

    def wait(self, *args):
        self.waited = True
        return self.work.wait(*args)

    def __getattr__(self, name: str):  # is_completed, exception, ...: the real work's
        return getattr(self.work, name)


class LearnerGroup:
    """``group`` as the learner may use it: rank, size, send and recv."""

    def __init__(self, group, office: PostOffice) -> None:
        object.__setattr__(self, "_group", group)
        object.__setattr__(self, "_office", office)
        object.__setattr__(self, "_started", [])
        object.__setattr__(self, "_count_lock", threading.Lock())
        object.__setattr__(self, "_counts", {"bytes": 0, "messages": 0, "headers": 0})

    def rank(self) -> int:
        return self._group.rank()

    def size(self) -> int:
        return self._group.size()

    def send(self, tensors: list, dst: int, tag: int = 0):
        me = self._group.rank()
        self._office.post("send", me, dst, tag, tensors[0])
        t = tensors[0]
        with self._count_lock:
            if tag >= HEADER_TAG:
                self._counts["headers"] += 1
            else:
                self._counts["bytes"] += t.numel() * t.element_size()
                self._counts["messages"] += 1
        work = _Tracked(self._group.send(tensors, dst, tag), "send", dst)
        self._started.append(work)
        return work

    def recv(self, tensors: list, src: int, tag: int = 0):
        self._office.post("recv", src, self._group.rank(), tag, tensors[0])
        work = _Tracked(self._group.recv(tensors, src, tag), "recv", src)
        self._started.append(work)
        return work

    def __getattr__(self, name: str):
        raise RefusedCall(
            f"the group given to your function allows only {', '.join(ALLOWED)} — expected "
            f"point-to-point messages, got a call to group.{name}. Hint: this exercise is to "
            "build it from p2p.send/recv/isend/irecv; torch's own collectives are what your "
            "answer is compared with."
        )

    def __setattr__(self, name: str, value) -> None:
        raise RefusedCall(f"the group given to your function is read-only (set {name})")

    def traffic(self) -> dict:
        """``{"bytes": payload bytes sent, "messages": payload messages, "headers": header
        messages}`` — what this rank sent through this group."""
        with self._count_lock:
            return dict(self._counts)

    def unwaited(self) -> list[str]:
        """What this rank started and never waited for, e.g. ``["isend to rank 1"]``."""
        return [
            f"i{w.kind} {'to' if w.kind == 'send' else 'from'} rank {w.peer}"
            for w in self._started
            if not w.waited
        ]


def guarded(fn: Callable, raw_group, learner: LearnerGroup) -> Callable:
    """``fn`` with ``raw_group`` replaced by ``learner`` in its arguments and as the thread's
    current group; raises :class:`UnwaitedMessage` if it returns with messages in flight."""

    def call(*args, **kwargs) -> Any:
        args = tuple(learner if a is raw_group else a for a in args)
        kwargs = {k: learner if v is raw_group else v for k, v in kwargs.items()}
        with use_group(learner):
            answer = fn(*args, **kwargs)
        left = learner.unwaited()
        if left:
            raise UnwaitedMessage(
                f"your function returned with {len(left)} message(s) never waited for: "
                f"{', '.join(left)}. Hint: keep what p2p.isend/irecv return and call .wait() "
                "on each before you return — until then the send may not have left (and the "
                "tensor must not change), and a receive buffer may not hold the data yet."
            )
        return answer

    return call


def _mistakes():
    """What the group's own errors mean, as classic mistakes (tried before the
    exercise's own, on a case that raised)."""
    from minidp.tools.exercise.spec import Mistake  # here: spec is the record, this the guard

    return (
        Mistake(
            "called the answer",
            "the function you called is this exercise's answer (minidp's collectives and "
            "textbook code, torch's own component): the check makes it unavailable. Write "
            "it yourself with the tools the stub's docstring names.",
            raised=r"RefusedCall: \S+ is this exercise's answer",
        ),
        Mistake(
            "receive buffer of another dtype",
            "a receive buffer must have the dtype of what is sent: torch.empty_like(chunk) "
            "(or dtype=tensor.dtype) — torch.empty(n) and torch.zeros(n) are float32.",
            raised=r"MessageMismatch: message dtypes differ",
        ),
        Mistake(
            "message sizes differ",
            "the sender and the receiver of each message must agree on its size. With numel "
            "% world != 0 the chunks differ in length: at every step send and receive the "
            "*same* chunk index, into a buffer of that chunk's size.",
            raised=r"MessageMismatch: message sizes differ",
        ),
        Mistake(
            "isend never waited for",
            "every p2p.isend / p2p.irecv returns a message: call .wait() on it before you "
            "return (or before you change the tensor it sends).",
            raised=r"UnwaitedMessage: ",
        ),
        Mistake(
            "used a collective instead of send/recv",
            "this exercise is the collective itself: build it from p2p.send / p2p.recv / "
            "p2p.isend / p2p.irecv; the group refuses gloo's own collectives.",
            raised=r"RefusedCall: |Default process group has not been initialized|"
            r"Invalid process group specified",
        ),
    )


GROUP_MISTAKES = _mistakes()
