"""Point-to-point messages: the only primitive minidp's collectives are built from.

Test: ``pytest tests/test_collectives.py tests/test_faults.py``

``isend``/``irecv`` on the group's own ``send``/``recv`` (any backend), plus: backend
failures as errors naming the peer, traffic counts and trace events, and a copy where the
backend cannot read the tensor (``device.carrier``). :func:`channel` gives a thread its own
tag space, so two threads' collectives on one group (DDP's comm thread, a user's
all-reduce inside backward) never pair up (torch: one ordered queue per group).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch

from minidp import trace
from minidp.comm import traffic
from minidp.comm.device import backend_of, carrier, reads
from minidp.comm.errors import CollectiveError, CollectiveTimeout, PeerError

_local = threading.local()  # per-thread: name of the collective running now, channel
# data tags < CHANNEL_SPAN; header tags (2**30) lie above all 32 channels (gloo: < 2**31)
CHANNEL_SPAN = 1 << 25
MAX_CHANNELS = 32
DDP_CHANNEL = 1  # the communication thread's collectives (CommThread, minidp.comm.launch_queue)


class operation:
    """``with operation(name):`` names the collective this thread is running, for error
    messages and traces. (A class: it is on every collective's path, and a generator-based
    context manager costs several times as much.)"""

    __slots__ = ("name", "previous")

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        self.previous = getattr(_local, "op", None)
        _local.op = self.name

    def __exit__(self, *exc) -> None:
        _local.op = self.previous


def current_operation() -> str:
    return getattr(_local, "op", None) or "point-to-point"


@contextlib.contextmanager
def channel(number: int) -> Iterator[None]:
    """Send and receive this thread's messages in tag space ``number`` while the block
    runs; every rank must use the same channel for the same collectives."""
    if not isinstance(number, int) or not 0 <= number < MAX_CHANNELS:
        raise ValueError(
            f"channel: expected an int in [0, {MAX_CHANNELS - 1}], got {number!r} "
            f"(0 is the default, {DDP_CHANNEL} is DDP's)"
        )
    previous = current_channel()
    _local.channel = number
    try:
        yield
    finally:
        _local.channel = previous


def current_channel() -> int:
    """This thread's channel (0 unless inside :func:`channel`)."""
    return getattr(_local, "channel", 0)


class Work:
    """One pending send or receive (torch's name): the backend's work plus what explains it."""

    __slots__ = ("backend", "peer", "kind", "nbytes", "group", "staged", "target")

    def __init__(self, backend, peer: int, kind: str, nbytes: int, group, staged=None, target=None):
        self.backend = backend  # the ProcessGroup's own work object
        self.peer = peer
        self.kind = kind
        self.nbytes = nbytes
        self.group = group
        # a copy the backend can read (device.carrier); a receive copies it into target
        self.staged = staged
        self.target = target

    def wait(self) -> None:
        """Block until the message is done; raise a minidp error if it cannot be."""
        try:
            self.backend.wait()
        except RuntimeError as exc:
            raise translate(exc, self.group, self.peer, self.kind) from exc
        if self.target is not None:
            self.target.copy_(self.staged)
            self.target = self.staged = None
        if self.kind == "recv":  # counted on arrival: a receive may be posted a call ahead
            traffic.add("recv", self.nbytes)
            if trace.active:
                trace.instant("recv", lane="comm", peer=self.peer, bytes=self.nbytes)


def translate(exc: BaseException, group, peer: int, kind: str) -> CollectiveError:
    """Turn a backend error into a :class:`CollectiveError` that names who and what."""
    text = str(exc)
    me = group.rank()
    what = current_operation()
    if isinstance(exc, CollectiveError):
        return exc
    if "Connection closed by peer" in text or "Connection reset" in text or "aborted" in text:
        return PeerError(
            f"{what}: rank {me} lost its connection to rank {peer} while waiting to "
            f"{kind} — rank {peer} (or a rank it depends on) crashed, exited or raised. "
            f"Hint: look at rank {peer}'s error above; this rank is only a bystander. "
            f"(backend said: {text.splitlines()[0][:200]})"
        )
    if "Timed out" in text or "timed out" in text or "Timeout" in text:
        return CollectiveTimeout(
            f"{what}: rank {me} timed out waiting to {kind} "
            f"{'from' if kind == 'recv' else 'to'} rank {peer} — that rank stalled, "
            "hangs in other code, or called a different collective. Hint: check that every "
            "rank runs the same collectives in the same order; raise the timeout if a rank "
            f"is legitimately slow. (backend said: {text.splitlines()[0][:200]})"
        )
    return CollectiveError(f"{what}: rank {me} failed to {kind} with rank {peer}: {text}")


def isend(tensor: torch.Tensor, peer: int, group, tag: int = 0) -> Work:
    """Start sending ``tensor`` (contiguous) to ``peer``, a *group* rank as in
    ``ProcessGroup.send`` (public arguments such as ``broadcast(src=...)`` are global)."""
    nbytes = tensor.numel() * tensor.element_size()
    traffic.add("send", nbytes)
    if trace.active:
        trace.instant("send", lane="comm", peer=peer, bytes=nbytes)
    to = None if tensor.is_cpu and _reads_host(group) else carrier(group, tensor)
    staged = None if to is None else tensor.to(to)  # gloo: a CUDA tensor goes via the host
    try:
        work = group.send(
            [tensor if to is None else staged], peer, tag + current_channel() * CHANNEL_SPAN
        )
    except RuntimeError as exc:
        raise translate(exc, group, peer, "send") from exc
    return Work(work, peer, "send", nbytes, group, staged)


def irecv(tensor: torch.Tensor, peer: int, group, tag: int = 0) -> Work:
    """Start receiving into ``tensor`` (contiguous) from group rank ``peer``."""
    nbytes = tensor.numel() * tensor.element_size()
    to = None if tensor.is_cpu and _reads_host(group) else carrier(group, tensor)
    staged = None if to is None else torch.empty_like(tensor, device=to)  # filled on arrival
    try:
        work = group.recv(
            [tensor if to is None else staged], peer, tag + current_channel() * CHANNEL_SPAN
        )
    except RuntimeError as exc:
        raise translate(exc, group, peer, "recv") from exc
    return Work(work, peer, "recv", nbytes, group, staged, None if to is None else tensor)


def _reads_host(group) -> bool:
    """The common case in one check: a host tensor on a backend that reads host memory."""
    return reads(backend_of(group), "cpu")


def send(tensor: torch.Tensor, peer: int, group, tag: int = 0) -> None:
    isend(tensor, peer, group, tag).wait()


def recv(tensor: torch.Tensor, peer: int, group, tag: int = 0) -> None:
    irecv(tensor, peer, group, tag).wait()


def wait_all(works: list[Work]) -> None:
    for w in works:
        w.wait()


class Pending:
    """What a collective with ``async_op=True`` returns (torch: a ``Work``): :meth:`wait`
    finishes its messages, then ``finish()`` (a copy back into a non-contiguous tensor)."""

    __slots__ = ("works", "name", "finish", "done")

    def __init__(self, works: list[Work], name: str, finish=None) -> None:
        self.works, self.name, self.finish, self.done = works, name, finish, False

    def wait(self) -> bool:
        if not self.done:
            with operation(self.name):
                wait_all(self.works)
            if self.finish is not None:
                self.finish()
            self.done = True
        return True

    def is_completed(self) -> bool:
        return self.done
