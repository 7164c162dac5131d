"""Small tensors: one exchange, then every chunk reduced locally *in the ring's order*.

Run it: ``python -m minidp bench allreduce`` (the rows below ``SMALL_BYTES``)
Test it: ``pytest tests/test_collectives.py -k "ring or direct"``

For a small tensor each of the ring's ``2(n-1)`` dependent steps costs a latency, not
bytes. Here every rank sends its tensor to every other (one step), then builds each ring
chunk's sum in the ring's association, so the bits are gloo's:
``chunk c = x[c] OP (x[c+1] OP (... OP (x[c-2] OP x[c-1])))`` (ranks mod n). The price,
``(n-1)·S`` bytes per rank instead of ``2(n-1)/n·S``, is nothing for small tensors.
"""

from __future__ import annotations

import torch

from minidp.comm import ops, p2p
from minidp.comm.ring import gloo_layout, reduce_in_place

# all_reduce takes this path up to this many bytes (the README's table: where each wins)
SMALL_BYTES = 256 << 10


@torch.no_grad()  # like c10d: a collective is not part of the autograd graph
def direct_all_reduce(tensor: torch.Tensor, op="sum", group=None) -> torch.Tensor:
    """All-reduce ``tensor`` in place in one exchange, bit-equal to gloo's ring; returns it.
    Arguments as :func:`minidp.comm.ring_all_reduce`."""

    def body(flat: torch.Tensor, g, name: str) -> None:
        chunks, _ = gloo_layout(flat.numel(), flat.element_size(), g.size())
        direct_pass(flat, chunks, g, name)

    return reduce_in_place(tensor, op, group, "direct_all_reduce", body, 1)


def direct_pass(flat: torch.Tensor, chunks: list[tuple[int, int]], group, op: str) -> None:
    """All-reduce ``flat`` (1-D, contiguous, rank-local) in place: exchange, then reduce.
    ``chunks`` (the ring's) fix the association; avg sums here, the caller divides."""
    rank, world = group.rank(), group.size()
    # (world, numel): row r is rank r's tensor; mine is a copy, as the reduction overwrites rows
    everyone = torch.empty((world, flat.numel()), dtype=flat.dtype, device=flat.device)
    everyone[rank] = flat
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
