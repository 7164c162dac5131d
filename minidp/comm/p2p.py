"""Point-to-point messages: the only primitive minidp's collectives are built from.

Every collective in ``minidp.comm`` is a pattern of ``isend``/``irecv`` calls on the
group's own ``send``/``recv`` (``ProcessGroup.send([t], peer, tag)``), so it runs on
any backend that has point-to-point: gloo on CPU, NCCL on GPUs.

This file also turns backend failures into errors a learner can act on:

* gloo's "Connection closed by peer" → :class:`PeerError` naming the peer rank;
* gloo's "Timed out waiting ... for recv" → :class:`CollectiveTimeout` naming the peer;

and feeds the traffic counters and the trace recorder (both free when off).

Test: ``pytest tests/test_collectives.py tests/test_faults.py``
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from minidp import trace
from minidp.comm import traffic
from minidp.comm.errors import CollectiveError, CollectiveTimeout, PeerError

_local = threading.local()  # per-thread: name of the collective running now


@contextlib.contextmanager
def operation(name: str) -> Iterator[None]:
    """Name the collective this thread is running, for error messages and traces."""
    previous = getattr(_local, "op", None)
    _local.op = name
    try:
        yield
    finally:
        _local.op = previous


def current_operation() -> str:
    return getattr(_local, "op", None) or "point-to-point"


class Message:
    """One pending send or receive: the backend's work plus what we need to explain it."""

    __slots__ = ("work", "peer", "direction", "nbytes", "group")

    def __init__(self, work, peer: int, direction: str, nbytes: int, group) -> None:
        self.work = work
        self.peer = peer
        self.direction = direction
        self.nbytes = nbytes
        self.group = group

    def wait(self) -> None:
        """Block until the message is done; raise a minidp error if it cannot be."""
        try:
            self.work.wait()
        except RuntimeError as exc:
            raise translate(exc, self.group, self.peer, self.direction) from exc
        if self.direction == "recv" and trace.active:
            trace.instant("recv", lane="comm", peer=self.peer, bytes=self.nbytes)


def translate(exc: BaseException, group, peer: int, direction: str) -> CollectiveError:
    """Turn a backend error into a :class:`CollectiveError` that names who and what."""
    text = str(exc)
    me = group.rank()
    what = current_operation()
    if isinstance(exc, CollectiveError):
        return exc
    if "Connection closed by peer" in text or "Connection reset" in text or "aborted" in text:
        return PeerError(
            f"{what}: rank {me} lost its connection to rank {peer} while waiting to "
            f"{direction} — rank {peer} (or a rank it depends on) crashed, exited or raised. "
            f"Hint: look at rank {peer}'s error above; this rank is only a bystander. "
            f"(backend said: {text.splitlines()[0][:200]})"
        )
    if "Timed out" in text or "timed out" in text or "Timeout" in text:
        return CollectiveTimeout(
            f"{what}: rank {me} timed out waiting to {direction} "
            f"{'from' if direction == 'recv' else 'to'} rank {peer} — that rank stalled, "
            "hangs in other code, or called a different collective. Hint: check that every "
            "rank runs the same collectives in the same order; raise the timeout if a rank "
            f"is legitimately slow. (backend said: {text.splitlines()[0][:200]})"
        )
    return CollectiveError(f"{what}: rank {me} failed to {direction} with rank {peer}: {text}")


def isend(tensor: torch.Tensor, peer: int, group, tag: int = 0) -> Message:
    """Start sending ``tensor`` (contiguous) to group rank ``peer``."""
    nbytes = tensor.numel() * tensor.element_size()
    traffic.add("send", nbytes)
    if trace.active:
        trace.instant("send", lane="comm", peer=peer, bytes=nbytes)
    try:
        work = group.send([tensor], peer, tag)
    except RuntimeError as exc:
        raise translate(exc, group, peer, "send") from exc
    return Message(work, peer, "send", nbytes, group)


def irecv(tensor: torch.Tensor, peer: int, group, tag: int = 0) -> Message:
    """Start receiving into ``tensor`` (contiguous) from group rank ``peer``."""
    nbytes = tensor.numel() * tensor.element_size()
    traffic.add("recv", nbytes)
    try:
        work = group.recv([tensor], peer, tag)
    except RuntimeError as exc:
        raise translate(exc, group, peer, "recv") from exc
    return Message(work, peer, "recv", nbytes, group)


def send(tensor: torch.Tensor, peer: int, group, tag: int = 0) -> None:
    isend(tensor, peer, group, tag).wait()


def recv(tensor: torch.Tensor, peer: int, group, tag: int = 0) -> None:
    irecv(tensor, peer, group, tag).wait()


def wait_all(messages: list[Message]) -> None:
    for m in messages:
        m.wait()
