"""The group a learner's function gets on a thread rank: a :class:`View` with ``rank``,
``size``, ``send`` and ``recv`` (what minidp's collectives are built from), nothing else. Both
ends of every message are matched (:class:`PostOffice`: a buffer of another dtype or size
raises before gloo aborts), every ``isend``/``irecv`` must be waited for, bytes counted."""

import threading
from collections import defaultdict, deque

from minidp.comm.agree import HEADER_TAG
from minidp.comm.group import use_group


class RefusedCall(RuntimeError):
    """The learner's code called something the exercise does not allow."""


class WrongGroup(RuntimeError):
    """A collective ran on another group than the one the learner's function was given."""


class MessageMismatch(Exception):
    """A send and its receive disagree (not a RuntimeError: ``p2p`` would rewrap it)."""


class UnwaitedMessage(Exception):
    """An ``isend``/``irecv`` was started and never waited for."""


_what = lambda t: f"{str(t.dtype)[6:]}, {t.numel()} elements ({t.nbytes} bytes)"


class PostOffice:
    """Both ends of every message of one case, matched in order per (src, dst, tag)."""

    def __init__(self) -> None:
        self._lock, self._waiting = threading.Lock(), defaultdict(deque)

    def post(self, kind: str, src: int, dst: int, tag: int, t) -> None:
        """Record one end; :class:`MessageMismatch` if the other end disagrees (then unmatched)."""
        with self._lock:
            queue = self._waiting[(src, dst, tag)]
            if not queue or queue[0][0] == kind:
                return queue.append((kind, t.dtype, t.numel(), _what(t)))
            _, dtype, numel, text = queue[0]
            if numel == t.numel() and (dtype == t.dtype or numel == 0):  # empty: no dtype
                return queue.popleft()
        sent, room = (text, _what(t)) if kind == "recv" else (_what(t), text)
        what, hint = ("dtypes", "the receive buffer has another dtype than the tensor sent: "
                      "make buffers with torch.empty_like(the chunk) or dtype=tensor.dtype — "
                      "torch.empty(n) is float32") if dtype != t.dtype else (
            "sizes", "with numel % world != 0 the chunks differ in length: at every step send "
            "and receive the *same* chunk index, into a buffer of that chunk's size")  # fmt: skip
        raise MessageMismatch(f"message {what} differ: rank {src} sends {sent} to rank {dst}, "
                              f"which receives it into {room}. Hint: {hint}.")  # fmt: skip

    def unmatched(self) -> list[str]:
        return [f"rank {src} sent {text} to rank {dst} (nobody received it)" if kind == "send"
                else f"rank {dst} posted a receive of {text} from rank {src} (nobody sent it)"
                for (src, dst, _), queue in self._waiting.items()
                for kind, _, _, text in queue]  # fmt: skip


class Wire:
    """One thread rank's messages through its real group: matched, counted, watched."""

    def __init__(self, group, office: PostOffice) -> None:
        self.group, self.office, self.lock = group, office, threading.Lock()
        self.counts = {"bytes": 0, "header_bytes": 0}  # payload; minidp's headers
        self.started: list[_Tracked] = []  # isend/irecv not waited for yet


class _Tracked:
    """A started send/recv, forgotten once waited for."""

    def __init__(self, wire: Wire, work, what: str) -> None:
        self.wire, self.work, self.what = wire, work, what
        wire.started.append(self)

    def wait(self, *args):
        if self in self.wire.started:
            self.wire.started.remove(self)
        return self.work.wait(*args)

    def __getattr__(self, name: str):  # is_completed, exception, ...: the real work's
        return getattr(self.work, name)


class View:
    """Some world ranks as a group: its own ``rank()``, ``size()``; ``send``/``recv`` by a Wire."""

    def __init__(self, wire: Wire, ranks: list[int], name: str = "given") -> None:
        for key, value in (("_wire", wire), ("_ranks", list(ranks)), ("_name", name)):
            object.__setattr__(self, key, value)

    def rank(self) -> int:
        return self._ranks.index(self._wire.group.rank())

    def size(self) -> int:
        return len(self._ranks)

    def send(self, tensors: list, dst: int, tag: int = 0):
        w, dst = self._wire, self._ranks[dst]
        w.office.post("send", w.group.rank(), dst, tag, tensors[0])
        with w.lock:  # (a learner's own threads may send too)
            w.counts["header_bytes" if tag >= HEADER_TAG else "bytes"] += tensors[0].nbytes
        return _Tracked(w, w.group.send(tensors, dst, tag), f"isend to rank {dst}")

    def recv(self, tensors: list, src: int, tag: int = 0):
        w, src = self._wire, self._ranks[src]
        w.office.post("recv", src, w.group.rank(), tag, tensors[0])
        return _Tracked(w, w.group.recv(tensors, src, tag), f"irecv from rank {src}")

    def sub(self, ranks: list[int], name: str) -> "View":  # ``ranks``: in this view's ranks
        return View(self._wire, [self._ranks[r] for r in ranks], name)

    def __getattr__(self, name: str):
        raise RefusedCall(
            f"the {self._name} group allows only rank, size, send and recv — expected "
            f"point-to-point messages (or minidp.comm's collectives, built from them), got a "
            f"call to group.{name}. Hint: torch.distributed's collectives are what the answer "
            "is compared with; use the tools the stub's docstring names.")  # fmt: skip

    def __setattr__(self, name: str, value) -> None:
        raise RefusedCall(f"the {self._name} group is read-only (set {name})")


class DefaultGroup:
    """The default group while a subgroup's function runs: used, it names the mistake."""

    def __init__(self, world: int, given: int) -> None:
        self.world, self.given = world, given

    def __getattr__(self, name: str):
        raise WrongGroup(
            f"a collective ran on the default group ({self.world} ranks), not on the group "
            f"your function was given ({self.given} ranks) — a minidp.comm call without "
            "group=? Hint: pass group=group (and use group.size() / group.rank()): the ranks "
            "outside your group never join, so on a real job this hangs.")  # fmt: skip


def guarded(fn, wire: Wire, current):
    """``fn`` with ``current`` as ``group=None``'s group; it must wait for its messages."""

    def call(*args, **kwargs):
        with use_group(current):
            answer = fn(*args, **kwargs)
        if wire.started:
            raise UnwaitedMessage(
                f"your function returned with {len(wire.started)} message(s) never waited "
                f"for: {', '.join(t.what for t in wire.started)}. Hint: keep what "
                "p2p.isend/irecv return and call .wait() on each before you return — until "
                "then the send may not have left (and the tensor must not change), and a "
                "receive buffer may not hold the data yet.")  # fmt: skip
        return answer

    return call
