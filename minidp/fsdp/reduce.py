"""The reduce-scatter FSDP2 runs on gloo, bit for bit, at reduce-scatter cost.

gloo's ``reduce_scatter_tensor`` all-reduces the whole ``(world * T,)`` input and keeps
this rank's ``T``: its bits follow gloo's chunks (``comm.ring.gloo_layout``), not a ring
reduce-scatter's order. Here: the reduce-scatter half of gloo's ring (rank ``c`` ends with
chunk ``c``), then each rank sends the parts of its chunk in another rank's piece:
``(world-1)/world`` of the input plus at most a chunk, not ``2(world-1)/world``.

Test: ``pytest tests/test_fsdp.py -k gloo``
"""

from __future__ import annotations

import torch

from minidp.comm import agree, ops, p2p
from minidp.comm.ring import MESSAGE_BYTES, gloo_layout, ring_pass

_FIXUP_TAG = 1 << 24  # above any tag the ring pass uses (segments x steps stay far below)


@torch.no_grad()
def gloo_reduce_scatter(flat: torch.Tensor, op: str, group) -> torch.Tensor:
    """This rank's ``(T,)`` piece of the reduction of ``flat`` ``(world * T,)`` — gloo's bits.
    ``flat`` (contiguous, rank-local) is the work buffer; ``op``: "sum" or "avg"."""
    rank, world = group.rank(), group.size()
    with p2p.operation("fsdp reduce_scatter"):
        # extra = -1 tells this layout apart from minidp.comm.reduce_scatter's (len(inputs))
        agree.agree(group, "reduce_scatter", flat, op, extra=-1, extra_name="gloo layout")
        piece = flat.numel() // world
        if world == 1 or piece == 0:
            return flat.clone()
        chunks, seg = gloo_layout(flat.numel(), flat.element_size(), world)
        if any(lo == hi for lo, hi in chunks):  # tiny input: some chunk empty, so do what
            ring_pass(flat, chunks, seg, group, op, world - 1, world - 1)  # gloo does
            return _finished(flat[rank * piece : (rank + 1) * piece], op, world)
        seg = max(seg, MESSAGE_BYTES // flat.element_size())  # message size: free, see ring
        ring_pass(flat, chunks, seg, group, op, world - 1, 0)  # chunk c done on rank c
        messages = []
        for c, (lo, hi) in enumerate(chunks):
            for r in range(world):
                a, b = max(lo, r * piece), min(hi, (r + 1) * piece)
                if a >= b or r == c:
                    continue  # nothing of piece r in chunk c, or already in place
                if c == rank:
                    messages.append(p2p.isend(flat[a:b], r, group, _FIXUP_TAG + c * world + r))
                elif r == rank:
                    messages.append(p2p.irecv(flat[a:b], c, group, _FIXUP_TAG + c * world + r))
        p2p.wait_all(messages)
        return _finished(flat[rank * piece : (rank + 1) * piece], op, world)


def _finished(piece: torch.Tensor, op: str, world: int) -> torch.Tensor:
    mine = piece.clone()
    ops.finish(op, mine, world)  # avg: the sum divided by world, as gloo's AVG
    return mine
