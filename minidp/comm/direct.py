"""Small tensors: one exchange, then every chunk reduced locally *in the ring's order*.

Run it: ``python -m minidp bench allreduce`` (the rows below ``SMALL_BYTES``)
Test it: ``pytest tests/test_collectives.py -k "ring or direct"``

Why this exists. The ring (``ring.py``) is bandwidth-optimal: each rank sends
``2(n-1)/n·S`` bytes. But it takes ``2(n-1)`` *dependent* steps — a rank cannot forward a
partial sum before it has received it — and for a small tensor each step costs a message
latency (and, in Python, a few dozen microseconds of bookkeeping), not bytes. At 4 KiB and
2 ranks the ring spent most of its time waiting for its two round trips.

So below ``SMALL_BYTES`` every rank sends its whole tensor to every other rank (one step:
all messages in flight at once) and then computes, for each of the ring's chunks, exactly
the sum the ring would have built — the same operands in the same association:

    chunk c = x[c] OP (x[c+1] OP (... OP (x[c-2] OP x[c-1])))      (rank indices mod n)

Floating-point results depend only on which partial sums meet, so this gives the ring's
(and gloo's) bits on every rank. The price is bytes: ``(n-1)·S`` sent per rank instead of
``2(n-1)/n·S`` — at 2 ranks exactly the same bytes, at 4 ranks 2× — and ``(n-1)·S`` of
local reduction instead of ``(n-1)/n·S``: nothing for small tensors, a loss for big ones.
MPI libraries make the same choice by size (MPICH: recursive doubling for short messages,
a ring or Rabenseifner's algorithm for long ones).
"""

from __future__ import annotations

import torch

from minidp.comm import ops, p2p
from minidp.comm.ring import gloo_layout, reduce_in_place

# Tensors up to this many bytes take the one-exchange path (the ring's chunks, gloo
# layout); larger ones the ring. ``python -m minidp bench allreduce`` times both at every
# size (rows "auto" and "ring"); the README's table says where each wins.
SMALL_BYTES = 256 << 10


@torch.no_grad()  # like c10d: a collective is not part of the autograd graph
def direct_all_reduce(tensor: torch.Tensor, op="sum", group=None) -> torch.Tensor:
    """All-reduce ``tensor`` in place in one exchange, bit-equal to gloo's ring; returns it.

    Same arguments as :func:`minidp.comm.ring_all_reduce`. Meant for small tensors;
    ``minidp.comm.all_reduce`` picks it below :data:`SMALL_BYTES`.
    """

    def body(flat: torch.Tensor, g, name: str) -> None:
        chunks, _ = gloo_layout(flat.numel(), flat.element_size(), g.size())
        direct_pass(flat, chunks, g, name)

    return reduce_in_place(tensor, op, group, "direct_all_reduce", body, 1)


def direct_pass(flat: torch.Tensor, chunks: list[tuple[int, int]], group, op: str) -> None:
    """All-reduce ``flat`` (1-D, contiguous, rank-local) in place: exchange, then reduce.

    ``chunks``: the ring's chunk ranges (they fix the association); ``op`` a name from
    ``ops.OPS`` (avg sums here, the caller divides).
    """
    rank, world = group.rank(), group.size()
    everyone = torch.empty(
        (world, flat.numel()), dtype=flat.dtype, device=flat.device
    )  # (world, numel)
    everyone[rank] = flat  # a copy: the reduction below overwrites rows in place
    peers = [r for r in range(world) if r != rank]
    # receives first, so every send finds its receive posted and leaves at once
    recvs = [p2p.irecv(everyone[r], r, group, 0) for r in peers]
    sends = [p2p.isend(flat, r, group, 0) for r in peers]
    p2p.wait_all(recvs)
    for c, (a, b) in enumerate(chunks):
        acc = everyone[(c - 1) % world, a:b]  # where the ring starts chunk c
        for k in range(2, world + 1):  # then leftwards round the ring, ending on rank c
            local = everyone[(c - k) % world, a:b]
            ops.combine(op, local, acc)  # local = x[c-k] OP acc, as that rank would
            acc = local
    p2p.wait_all(sends)  # the sends read flat: only now may it change
    for c, (a, b) in enumerate(chunks):
        flat[a:b] = everyone[c, a:b]  # chunk c's result sits in row c (the ring's last rank)
