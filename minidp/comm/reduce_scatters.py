"""Reduce-scatter with gloo's bits: ``reduce_scatter`` and ``reduce_scatter_tensor``.

Test it: ``pytest tests/test_reduce_scatter_tensor.py`` (every world size 2-8, chunk sizes
0-65536, against gloo's own)

gloo builds both from its all-reduce, so that is where their bits come from:
``reduce_scatter_tensor`` all-reduces the whole ``(world * n,)`` input and keeps this
rank's ``n``; ``reduce_scatter`` all-reduces each of the ``world`` inputs on its own and
keeps input ``rank``. An all-reduce sums every element in the order of its gloo chunk
(``ring.gloo_layout``): chunk ``c`` as ``x[c] + (x[c+1] + (...))``, finished on rank ``c``.
Here, at reduce-scatter cost:

1. lay the elements out by the chunk gloo gives them (the tensor form: as they are; the
   list form: chunk ``c`` of every input side by side);
2. the reduce-scatter half of the ring (``ring.ring_pass``) leaves chunk ``c`` summed, in
   gloo's order, on rank ``c``;
3. each rank sends the parts of its chunk that another rank keeps (chunk boundaries need
   not fall on the ranks' pieces).

Bytes per rank: the ring's ``(W-1)/W`` of the input plus those parts, not the
``2(W-1)/W`` of the all-reduce that gloo itself runs.
"""

from __future__ import annotations

import torch

from minidp.comm import agree, ops, p2p
from minidp.comm import group as groups
from minidp.comm.ring import MESSAGE_BYTES, gloo_layout, ring_pass

_DELIVER_TAG = 1 << 24  # step 3's messages: above any tag the ring pass uses


@torch.no_grad()  # like c10d: a collective is not part of the autograd graph
def reduce_scatter(output: torch.Tensor, input_list: list[torch.Tensor], op="sum", group=None):
    """``output`` on rank r = reduction over ranks of ``input_list[r]``; returns it."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "reduce_scatter"):
        return output
    world = g.size()
    with p2p.operation("reduce_scatter"):
        name, _ = agree.agree_reduce(
            g, "reduce_scatter", output, op, "reduce_scatter", len(input_list), "len(input_list)"
        )
        if len(input_list) != world:
            raise ValueError(
                f"reduce_scatter: input_list has {len(input_list)} tensors but the group has "
                f"{world} ranks — pass one input tensor per rank"
            )
        n = output.numel()
        for i, t in enumerate(input_list):
            if t.numel() != n or t.dtype != output.dtype:
                raise ValueError(
                    f"reduce_scatter: input_list[{i}] is {tuple(t.shape)} {t.dtype} but output is "
                    f"{tuple(output.shape)} {output.dtype} — every input must match the output"
                )
        # gloo: one all-reduce per input, so chunk c of input i is gloo_layout(n)'s chunk c;
        # in buf, chunk c is (world, width_c): that chunk of every input, side by side
        chunks, _ = gloo_layout(n, output.element_size(), world)
        buf = output.new_empty(world * n)  # rank-local copy of the inputs, by chunk
        wanted = []
        for lo, hi in chunks:
            rows = buf[world * lo : world * hi].view(world, hi - lo)
            torch.stack([t.reshape(-1)[lo:hi] for t in input_list], out=rows)
            wanted.append([(world * lo + r * (hi - lo), world * lo + (r + 1) * (hi - lo), lo)
                           for r in range(world)])  # fmt: skip
        ring_chunks = [(world * lo, world * hi) for lo, hi in chunks]
        return _scatter(buf, ring_chunks, wanted, output, name, g)


@torch.no_grad()
def reduce_scatter_tensor(
    output: torch.Tensor,
    input: torch.Tensor,
    op="sum",
    group=None,
    *,
    input_is_scratch: bool = False,
) -> torch.Tensor:
    """``output`` on rank r = reduction over ranks of ``input[r*n:(r+1)*n]`` (contiguous,
    ``world * n``); returns ``output``. ``input_is_scratch=True`` (minidp's own keyword)
    lends ``input`` to the ring as its working buffer, leaving it undefined: one copy of
    the whole input less, for a caller that refills it anyway (ZeRO-2's send buffers)."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "reduce_scatter"):
        return output
    world = g.size()
    with p2p.operation("reduce_scatter_tensor"):
        name, _ = agree.agree_reduce(
            g, "reduce_scatter_tensor", output, op, "reduce_scatter_tensor", world, "world"
        )
        n = output.numel()
        if input.numel() != world * n or input.dtype != output.dtype or not input.is_contiguous():
            raise ValueError(
                f"reduce_scatter_tensor: expected a contiguous {output.dtype} input of "
                f"{world} x {n} elements, got {tuple(input.shape)} {input.dtype}"
                f"{'' if input.is_contiguous() else ' (not contiguous)'} — one output's worth "
                "per rank"
            )
        buf = input.view(-1) if input_is_scratch else input.reshape(-1).clone()
        # gloo: one all-reduce of the whole input, so its chunks are gloo_layout(world * n)'s;
        # rank r keeps [r*n, (r+1)*n), which may span two chunks or part of one
        chunks, _ = gloo_layout(world * n, output.element_size(), world)
        wanted = [
            [(max(lo, r * n), max(min(hi, (r + 1) * n), lo), max(lo, r * n) - r * n)
             for r in range(world)]
            for lo, hi in chunks
        ]  # fmt: skip
        return _scatter(buf, chunks, wanted, output, name, g)


def _scatter(buf: torch.Tensor, chunks, wanted, output: torch.Tensor, name: str, g):
    """Steps 2 and 3 on ``buf`` (1-D, rank-local, worked in place): ``wanted[c][r] = (lo,
    hi, at)`` is the part of chunk ``c`` that rank ``r`` keeps, at ``at`` in its output."""
    rank, world, n = g.rank(), g.size(), output.numel()
    mine = output.view(-1) if output.is_contiguous() else output.new_empty(n)  # (n,)
    if world > 1 and n:
        seg = max(MESSAGE_BYTES // buf.element_size(), 1)  # message size: free, see ring.py
        ring_pass(buf, chunks, seg, g, name, world - 1, 0)  # chunk c summed on rank c
    messages = []
    for c in range(world):
        for r, (lo, hi, at) in enumerate(wanted[c]):
            tag = _DELIVER_TAG + c * world + r
            if lo >= hi or rank not in (c, r):
                continue
            if c == r:
                mine[at : at + hi - lo] = buf[lo:hi]
            elif c == rank:
                messages.append(p2p.isend(buf[lo:hi], r, g, tag))
            else:
                messages.append(p2p.irecv(mine[at : at + hi - lo], c, g, tag))
    p2p.wait_all(messages)
    ops.finish(name, mine, world)
    if mine.data_ptr() != output.data_ptr() or not output.is_contiguous():
        output.copy_(mine.view(output.shape))
    return output
