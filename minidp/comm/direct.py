"""Small tensors: one exchange, then every chunk reduced locally *in the ring's order*.

Run it: ``python -m minidp bench allreduce`` (the rows up to ``small_bytes(world)``)
Test it: ``pytest tests/test_collectives.py -k "ring or direct"``

For a small tensor each of the ring's ``2(n-1)`` dependent steps costs a latency, not
bytes. Here every rank sends its tensor to every other in the message that carries its
header (``headers.py``: one step, check included), then builds each ring chunk's sum in
the ring's association, so the bits are gloo's:
``chunk c = x[c] OP (x[c+1] OP (... OP (x[c-2] OP x[c-1])))`` (ranks mod n). The price,
``(n-1)·S`` bytes per rank instead of ``2(n-1)/n·S``, is nothing for small tensors, and
at 2 ranks it is no price at all: one round where the ring (and its header) take three.
"""

from __future__ import annotations

import torch

from minidp.comm import ops, p2p
from minidp.comm.headers import payload_bytes
from minidp.comm.ring import gloo_layout, reduce_in_place

# all_reduce takes this path up to small_bytes(world): what rides in the header's message
# (headers.py), 1 MiB at 2 ranks, 256 KiB from 3 on
small_bytes = payload_bytes
COMMUTATIVE = ("sum", "avg", "product")  # max/min: gloo's NaN rule depends on the order


def direct_all_reduce(tensor: torch.Tensor, op="sum", group=None) -> torch.Tensor:
    """All-reduce ``tensor`` in place in one exchange, bit-equal to gloo's ring; returns it.
    Arguments as :func:`minidp.comm.ring_all_reduce`."""

    def body(flat: torch.Tensor, g, name: str, payloads) -> None:
        # payloads: every peer's tensor, if it came with its header (a dict of its own, as
        # direct_pass writes into it)
        direct_pass(flat, g, name, None if payloads is None else dict(payloads))

    return reduce_in_place(tensor, op, group, "direct_all_reduce", body, 1, carry=True)


def direct_pass(flat: torch.Tensor, group, op: str, rows=None) -> None:
    """All-reduce ``flat`` (1-D, contiguous, rank-local) in place: exchange, then reduce.
    The ring's chunks (``gloo_layout``) fix the association; avg sums here, the caller divides.
    ``rows``: every peer's tensor (``{rank: (numel,)}``, rank-local, overwritten), if it
    came already; else it is exchanged here."""
    rank, world = group.rank(), group.size()
    sends = []
    if rows is None:
        # receives first, so every send finds its receive posted and leaves at once
        rows = {r: torch.empty_like(flat) for r in range(world) if r != rank}
        recvs = [p2p.irecv(row, r, group, 0) for r, row in rows.items()]
        sends = [p2p.isend(flat, r, group, 0) for r in rows]
        p2p.wait_all(recvs)
        p2p.wait_all(sends)  # the sends read flat: only now may it change
    if world == 2 and op in COMMUTATIVE:
        # two ranks: chunk 0 is x0 OP x1, chunk 1 is x1 OP x0 — the same bits for these
        # ops (IEEE + and * commute exactly), so one pass over the whole tensor is gloo's
        ops.combine(op, flat, rows[1 - rank])
        return
    chunks, _ = gloo_layout(flat.numel(), flat.element_size(), world)
    rows[rank] = flat  # row r is rank r's tensor; the reduction works in the rows
    for c, (a, b) in enumerate(chunks):
        acc = rows[(c - 1) % world][a:b]  # where the ring starts chunk c
        for k in range(2, world + 1):  # then leftwards round the ring, ending on rank c
            local = rows[(c - k) % world][a:b]
            ops.combine(op, local, acc)  # local = x[c-k] OP acc, as that rank would
            acc = local
    for c, (a, b) in enumerate(chunks):
        if c != rank:
            flat[a:b] = rows[c][a:b]  # chunk c's result sits in row c (the ring's last rank)
