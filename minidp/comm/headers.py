"""The header exchange behind every collective's check: all-to-all, in one message latency.

Run it: ``python -m minidp bench allreduce --breakdown`` (the "check" row times it)
Test it: ``pytest tests/test_collectives.py -k "header or mismatch or verdict"``

Every rank sends its small header (``agree.py`` says what is in it) to every other rank,
and receives everyone's, so every rank ends up with the same table and reaches the same
verdict.

Why the receives of the *next* exchange are posted at the end of this one. gloo (like
most transports for large messages) uses a rendezvous: a send leaves only once the
receiver has announced its posted receive (``NOTIFY_RECV_READY`` in gloo's TCP pair). If
both ranks post their receive and then send at the same moment, each send first waits for
the other side's announcement: two message latencies for a 136-byte header, as much as
the whole data pass of a small all-reduce. A receive posted one call *ahead* has been
announced long before the next send, which then leaves at once: one latency. Headers
always have the same size and tag, so a receive posted ahead matches whatever collective
comes next on that group and channel; nothing else uses the tag.

What that costs: one posted receive per peer, per group and channel, held between calls
(a few hundred bytes). Where this rank's peer dies between two calls, the error surfaces
at the next call's wait, naming the peer, exactly as before. Only torch's own
groups (``ProcessGroup``, ``ProcessGroupGloo``) get receives posted ahead: another
group-like object (the exercise checker's learner group, which audits every message)
gets the plain exchange.
"""

from __future__ import annotations

import threading
import weakref

import torch
import torch.distributed as dist

from minidp.comm import p2p
from minidp.comm.errors import CollectiveError

HEADER_TAG = 1 << 30  # header messages never match data messages (those use small tags)
# Headers exchanged with receives posted ahead use a tag of their own: the same torch group
# may also be used through a wrapper that gets the plain exchange (the checker's learner
# group around it), and a plain receive must never queue behind a parked one.
AHEAD_TAG = HEADER_TAG + 1

# group -> {(channel, world): _Posted}: the receives for that group's next exchange. Weak
# keys, and the parked works hold no reference to the group: a finished world's group is
# freed with its receives (its backend closes them).
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
    """Receives are posted ahead on torch's groups: a ``ProcessGroup`` (``init_process_group``,
    ``new_group``) or a bare ``ProcessGroupGloo`` (a thread world's rank)."""
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
    """One more header exchange before this rank raises, its errors ignored.

    Why: a rank that raises may close its connections at once (a thread world tears its
    group down, a process exits). A peer still reading this rank's header from the socket
    then loses it ("connection reset": closing a socket with unread data in it resets the
    connection) and raises a bystander's PeerError instead of the same verdict — seen in
    about 1 call in 150 at 3 ranks. A rank that completes this second exchange knows every
    peer has finished the first, which is all the verdict needs; a failure here only means
    a peer already left.
    """
    try:
        exchange(group, mine)
    except CollectiveError:
        pass
