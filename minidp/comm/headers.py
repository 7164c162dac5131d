"""The header exchange behind every collective's check: all-to-all, in one message latency.

Run it: ``python -m minidp bench allreduce --breakdown`` (the "check" row times it)
Test it: ``pytest tests/test_collectives.py -k "header or mismatch or verdict"``

Every rank sends its header to every other, so all hold the same table. gloo's sends wait
for the receiver to announce its receive (a rendezvous), so the *next* exchange's receives
are posted at the end of this one: one latency instead of two. Headers have one size and
tag, so a parked receive matches whatever collective comes next on that group and channel.
Only torch's own groups park receives; wrappers (the checker's) get the plain exchange.
"""

from __future__ import annotations

import threading
import weakref

import torch
import torch.distributed as dist

from minidp.comm import p2p
from minidp.comm.errors import CollectiveError

HEADER_TAG = 1 << 30  # header messages never match data messages (those use small tags)
# receives posted ahead: a tag of their own, so a plain receive never queues behind one
AHEAD_TAG = HEADER_TAG + 1

# group -> {(channel, world, width): _Posted}; weak keys, and parked works hold no group
_posted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()  # DDP's communication thread and the user's exchange concurrently


class _Posted:
    """One exchange's receive buffers, one per peer (rank-local), and their receives."""

    __slots__ = ("bufs", "recvs")

    def __init__(self, group, width: int, tag: int) -> None:
        world, rank = group.size(), group.rank()
        peers = [r for r in range(world) if r != rank]
        self.bufs = {r: torch.empty(width, dtype=torch.int64) for r in peers}  # (width,) each
        self.recvs = [p2p.irecv(self.bufs[r], r, group, tag) for r in peers]


def _ahead(group) -> bool:
    """Torch's groups: a ``ProcessGroup`` or a bare ``ProcessGroupGloo`` (a thread world's)."""
    return isinstance(group, (dist.ProcessGroup, dist.ProcessGroupGloo))


def exchange(group, mine: list[int]) -> list[list[int]]:
    """Every rank's header (``mine``: ints, the same length on every rank), on every rank."""
    rank, world = group.rank(), group.size()
    key = (p2p.current_channel(), world, len(mine))
    ahead = _ahead(group)
    tag = AHEAD_TAG if ahead else HEADER_TAG
    posted = None
    if ahead:
        with _lock:
            posted = _posted.get(group, {}).pop(key, None)
    if posted is None:
        posted = _Posted(group, len(mine), tag)  # receives first: sends then find them posted
    else:
        for w in posted.recvs:
            w.group = group  # parked without it (see _posted)
    header = torch.tensor(mine, dtype=torch.int64)
    sends = [p2p.isend(header, r, group, tag) for r in posted.bufs]
    p2p.wait_all(posted.recvs)
    table = [mine if r == rank else posted.bufs[r].tolist() for r in range(world)]
    if ahead:  # the next exchange's receives, announced while this call goes on
        parked = _Posted(group, len(mine), tag)
        for w in parked.recvs:
            w.group = None
        with _lock:
            _posted.setdefault(group, {})[key] = parked
    p2p.wait_all(sends)  # the sends read header
    return table


def linger(group, mine: list[int]) -> None:
    """One more exchange before raising, errors ignored: a rank that closes its sockets
    while a peer still reads its header would give that peer "connection reset" (a
    bystander's PeerError) instead of the same verdict."""
    try:
        exchange(group, mine)
    except CollectiveError:
        pass
