"""Every collective's first message: this rank's header, and a small all-reduce's data with it.

Run it: ``python -m minidp bench allreduce`` (the "check" column times the header's share)
Test it: ``pytest tests/test_headers.py tests/test_collectives.py -k mismatch``

At the start of a collective every rank sends one message to every other: its header
(what it is calling, ``agree.py``), followed — where every peer needs this rank's data,
as the direct all-reduce does — by the data itself. So the check that stops mismatched
calls from hanging rides on the data instead of costing a round of its own. Every rank
receives every header, so all reach the same verdict before anything else moves.

Why it can never abort the process: gloo aborts when a message is *longer* than its
receive buffer and accepts a shorter one. Every first message is received into a buffer
of the largest one (header + ``payload_bytes(world)``); a rank with more data sends the header
alone, and nothing else until the headers agree. (NCCL needs a send and its receive to
have one size: there the headers travel alone, at their one size, and data after them.)

Why it costs one latency, not two: gloo's send waits for the receiver to announce its
receive (a rendezvous), so the *next* collective's receives are posted (parked) at the
end of this one, into the other of two buffer sets. One first message per peer, one
size and tag: a parked receive matches whatever collective comes next on that group and
channel. Only torch's own groups park and carry data; wrappers (the exercise checker's,
the tracer's) get a plain, header-only exchange posted at call time.
"""

from __future__ import annotations

import threading
import weakref

import torch
import torch.distributed as dist

from minidp.comm import p2p, traffic
from minidp.comm.device import backend_of, reads
from minidp.comm.errors import CollectiveError

HEADER_TAG = 1 << 30  # header messages never match data messages (those use small tags)
# receives posted ahead: a tag of their own, so a plain receive never queues behind one
AHEAD_TAG = HEADER_TAG + 1


def payload_bytes(world: int) -> int:
    """The most data a first message carries: the direct all-reduce's whole tensor, which
    ``all_reduce`` picks up to this size. 1 MiB between 2 ranks, where that is the ring's
    bytes in one round instead of three; 256 KiB from 3 on, where it sends ``(n-1)·S``
    against the ring's ``2(n-1)/n·S``."""
    return 1 << 20 if world == 2 else 256 << 10


# group -> {(channel, world, header_bytes): _Mailbox}; weak keys, parked works hold no group
_boxes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()  # DDP's communication thread and the user's exchange concurrently


class _Posted:
    """One exchange's receives, one per peer, into ``bufs`` (rank-local); ``heads``: the
    headers' int64 fields in them, as numpy views (reading one is a list, not a tensor op)."""

    __slots__ = ("bufs", "heads", "recvs", "index")

    def __init__(self, group, bufs: dict, heads: dict, tag: int, index: int = 0) -> None:
        self.bufs, self.heads, self.index = bufs, heads, index  # index: the mailbox's set
        self.recvs = [p2p.irecv(b, r, group, tag) for r, b in bufs.items()]


class _Mailbox:
    """A torch group's first messages on one channel: two receive buffer sets (one parked,
    one being read) and a send buffer, ``hb + room`` bytes each (rank-local)."""

    __slots__ = ("sets", "heads", "send", "send_head", "parked", "turn", "hb", "cuts")

    def __init__(self, rank: int, world: int, hb: int, room: int) -> None:
        peers = [r for r in range(world) if r != rank]
        self.hb = hb
        self.sets = [{r: torch.empty(hb + room, dtype=torch.uint8) for r in peers} for _ in "ab"]
        self.heads = [
            {r: b[:hb].view(torch.int64).numpy() for r, b in bufs.items()} for bufs in self.sets
        ]
        self.send = torch.empty(hb + room, dtype=torch.uint8)
        self.send_head = self.send[:hb].view(torch.int64).numpy()  # (hb / 8,) int64
        self.parked: _Posted | None = None
        self.turn = 0  # the set the next receives go into
        self.cuts: dict[tuple, tuple] = {}  # (nbytes, dtype) -> cut()

    def post(self, group) -> _Posted:
        turn, self.turn = self.turn, 1 - self.turn
        return _Posted(group, self.sets[turn], self.heads[turn], AHEAD_TAG, turn)

    def cut(self, nbytes: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, list]:
        """For ``nbytes`` of ``dtype`` data: the message to send, its data part, and each
        receive set's data parts (``{rank: view}``), as ``dtype``. Made once per size and
        dtype: every call would otherwise cut them anew, and the first message is the
        latency that counts. (``hb`` is a multiple of 8: any dtype's view lines up.)"""
        key = (nbytes, dtype)
        cut = self.cuts.get(key)
        if cut is None:
            if len(self.cuts) >= 16:  # DDP's buckets come in a few sizes; anything else: renew
                self.cuts.clear()
            hb, end = self.hb, self.hb + nbytes
            message = self.send[:end]
            peers = [{r: b[hb:end].view(dtype) for r, b in bufs.items()} for bufs in self.sets]
            cut = self.cuts[key] = (message, message[hb:].view(dtype), peers)
        return cut


def _ahead(group) -> bool:
    """Torch's groups: a ``ProcessGroup`` or a bare ``ProcessGroupGloo`` (a thread world's)."""
    return isinstance(group, (dist.ProcessGroup, dist.ProcessGroupGloo))


def _room(group) -> int:
    """The data a first message may carry on ``group``: ``payload_bytes`` where the
    headers (host memory) travel on gloo, which takes a message shorter than its receive
    buffer; none on NCCL, whose send and receive must have one size."""
    return payload_bytes(group.size()) if reads(backend_of(group), "cpu") else 0


def exchange(
    group, mine: list[int], payload: torch.Tensor | None = None
) -> tuple[list[list[int]], dict[int, torch.Tensor] | None]:
    """Every rank's header (``mine``: ints, the same length on every rank; the table's rows
    end with one more, the bytes of data each rank sent with it), on every rank; and each
    peer's ``payload`` (``{rank: view}`` in its dtype, valid until the next exchange but one
    on this group and channel) if every rank's came with its header, else None (then the
    collective sends its data itself). ``payload``: 1-D, contiguous, at most
    ``payload_bytes(world)``; carried if it is in host memory on a torch group on gloo."""
    rank, world = group.rank(), group.size()
    ahead = _ahead(group)
    room = _room(group) if ahead else 0
    carry = payload is not None and payload.is_cpu and room > 0
    nbytes = payload.numel() * payload.element_size() if carry else 0
    mine = [*mine, nbytes]  # the header's last field: the bytes of data that follow it
    hb = 8 * len(mine)
    if not ahead:  # a wrapper: the plain exchange, headers only
        header = torch.tensor(mine, dtype=torch.int64)
        bufs = {r: torch.empty_like(header) for r in range(world) if r != rank}
        posted = _Posted(group, bufs, {}, HEADER_TAG)
        sends = [p2p.isend(header, r, group, HEADER_TAG) for r in posted.bufs]
        p2p.wait_all(posted.recvs)
        p2p.wait_all(sends)
        return [mine if r == rank else posted.bufs[r].tolist() for r in range(world)], None
    key = (p2p.current_channel(), world, hb)
    with _lock:
        box = _boxes.setdefault(group, {}).get(key)
        if box is None:
            box = _boxes[group][key] = _Mailbox(rank, world, hb, room)
        posted, box.parked = box.parked, None
    if posted is None:  # the first exchange on this group and channel
        posted = box.post(group)
    else:
        for w in posted.recvs:
            w.group = group  # parked without it (see _boxes)
    message, data, peers = box.cut(nbytes, payload.dtype if nbytes else torch.uint8)
    box.send_head[:] = mine
    if nbytes:
        data.copy_(payload)
    sends = [p2p.isend(message, r, group, AHEAD_TAG) for r in posted.bufs]
    for w in posted.recvs:
        w.nbytes = hb  # counted as a header on arrival; the data it carried, below
        w.wait()
    table = [mine if r == rank else posted.heads[r].tolist() for r in range(world)]
    traffic.add("recv", sum(row[-1] for row in table) - nbytes, messages=0)
    parked = box.post(group)  # the next exchange's receives, announced while this call goes on
    for w in parked.recvs:
        w.group = None
    with _lock:
        box.parked = parked
    p2p.wait_all(sends)  # the sends read the send buffer
    if not nbytes or any(row[-1] != nbytes for row in table):
        return table, None  # (a rank whose data is on another device sent none: no one uses it)
    return table, peers[posted.index]


def linger(group, mine: list[int]) -> None:
    """One more exchange before raising, errors ignored: a rank that closes its sockets
    while a peer still reads its header would give that peer "connection reset" (a
    bystander's PeerError) instead of the same verdict."""
    try:
        exchange(group, mine)
    except CollectiveError:
        pass
