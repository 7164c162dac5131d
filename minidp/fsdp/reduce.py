"""The reduce-scatter FSDP2 runs on gloo, bit for bit, at reduce-scatter cost.

gloo has no reduce-scatter algorithm of its own: ``reduce_scatter_tensor`` all-reduces the
whole ``(world * T,)`` input with its segmented ring and keeps this rank's ``T`` elements.
Its bits are therefore set by the all-reduce's summation order, which depends on gloo's
chunk boundaries (``minidp.comm.ring.gloo_layout``) — not on the ``world`` pieces of ``T``.
A plain ring reduce-scatter (``minidp.comm.reduce_scatter``) adds piece ``r`` in another
order, and from 3 ranks on a few elements round differently.

This version gets gloo's bits without the all-gather half of an all-reduce:

1. the reduce-scatter half of gloo's ring on the whole input (``ring_pass`` with gloo's
   layout): rank ``c`` ends with gloo's chunk ``c`` summed in gloo's order;
2. gloo's chunks and the ``world`` pieces do not line up (chunks are whole segments), so
   each rank sends the parts of its finished chunk that belong to another rank's piece
   to that rank — a few boundary elements, at most a chunk.

Bytes sent per rank: ``(world-1)/world`` of the input plus the boundary parts, against
``2(world-1)/world`` for the all-reduce gloo does. Test: ``pytest tests/test_fsdp.py -k gloo``
"""

from __future__ import annotations

import torch

from minidp.comm import agree, ops, p2p
from minidp.comm.ring import MESSAGE_BYTES, gloo_layout, ring_pass

_FIXUP_TAG = 1 << 24  # above any tag the ring pass uses (segments x steps stay far below)


@torch.no_grad()
def gloo_reduce_scatter(flat: torch.Tensor, op: str, group) -> torch.Tensor:
    """This rank's ``(T,)`` piece of the reduction of ``flat`` ``(world * T,)`` — gloo's bits.

    ``flat`` (contiguous, rank-local) is used as the work buffer; ``op``: "sum" or "avg".
    """
    rank, world = group.rank(), group.size()
    with p2p.operation("fsdp reduce_scatter"):
        # the header of a reduce-scatter whose tensor is the whole input; extra = -1 marks
        # this layout apart from minidp.comm.reduce_scatter (extra = len(input_list))
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
