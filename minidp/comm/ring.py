"""Ring all-reduce = reduce-scatter + all-gather, around a ring of send/recv.

Run it: ``python -m minidp demo ring --world-size 4 --numel 12``
Test it: ``pytest tests/test_collectives.py -k ring``

The idea (every rank sends only to its left neighbour and receives only from its right):

* split the tensor into ``world`` chunks;
* **reduce-scatter**, ``world-1`` steps: pass a partial sum of one chunk to the left and
  add your own piece of the chunk that arrives; afterwards rank ``c`` holds chunk ``c``
  fully reduced;
* **all-gather**, ``world-1`` steps: pass the finished chunks round the ring.

Every rank sends ``2(n-1)/n·S`` bytes whatever ``n`` is — the reason the ring scales and
the parameter server (``naive.py``) does not.

Two layouts share one algorithm (:func:`ring_pass`):

* ``textbook``: ``world`` near-equal chunks, each sent as one message — the version to
  read and to draw.
* ``gloo``: the exact schedule of gloo's CPU all-reduce, so the result is *bit-for-bit*
  equal to ``torch.distributed.all_reduce``. Chunk boundaries are multiples of a
  *segment* (``min(total/2n, 1 MiB)`` bytes) and each chunk travels as several segments,
  every segment forwarded as soon as it is summed — so sending one segment overlaps
  adding the next, which is where the speed comes from.

Chunk ``c`` is reduced in the order gloo uses: it starts at rank ``c+1`` and travels
left, each rank computing ``acc = mine + acc``, and ends on rank ``c``:
``x[c] + (x[c-1] + (... + x[c+1]))`` (indices mod n). Floating-point addition is not
associative, so this order is what makes the bits match.
"""

from __future__ import annotations

import math

import torch

from minidp.comm import agree, ops, p2p
from minidp.comm import group as groups


def gloo_layout(numel: int, element_size: int, world: int) -> tuple[list[tuple[int, int]], int]:
    """Chunk ranges ``[(start, end)] * world`` and the segment length, in elements, as gloo.

    segBytes = roundUp(min(ceil(total / 2n), 1 MiB), es)
    numSegments = roundUp(max(ceil(total / segBytes), 2n), n); chunk c = numSegments/n segments
    """
    total = numel * element_size
    seg_bytes = max(min(math.ceil(total / (2 * world)), 1 << 20), 1)
    seg_bytes = math.ceil(seg_bytes / element_size) * element_size  # round up to an element
    num_segments = max(math.ceil(total / seg_bytes), 2 * world)
    num_segments = math.ceil(num_segments / world) * world
    seg = seg_bytes // element_size  # elements per segment
    per_chunk = num_segments // world * seg  # elements per chunk (the last ones may be short)
    chunks = [(min(c * per_chunk, numel), min((c + 1) * per_chunk, numel)) for c in range(world)]
    return chunks, seg


def textbook_layout(numel: int, world: int) -> tuple[list[tuple[int, int]], int]:
    """``world`` near-equal chunks (the first ``numel % world`` one longer), one message each."""
    base, rest = divmod(numel, world)
    bounds = [0]
    for c in range(world):
        bounds.append(bounds[-1] + base + (1 if c < rest else 0))
    chunks = [(bounds[c], bounds[c + 1]) for c in range(world)]
    return chunks, max(base + (1 if rest else 0), 1)


def _segments(lo: int, hi: int, seg: int) -> list[tuple[int, int]]:
    return [(s, min(s + seg, hi)) for s in range(lo, hi, seg)]


def ring_pass(
    flat: torch.Tensor,
    chunks: list[tuple[int, int]],
    seg: int,
    group,
    op: str | None,
    tag: int = 0,
) -> None:
    """One trip round the ring, in place on ``flat`` (1-D, contiguous, rank-local).

    ``op`` given: reduce-scatter (rank r ends with chunk r reduced). ``op=None``:
    all-gather (rank r's chunk r is copied to every rank).

    At step s rank r sends chunk ``r+off+s`` left and receives chunk ``r+off+1+s`` from the
    right (off = 1 for reduce-scatter, 0 for all-gather), so the chunk received at step s
    is exactly the chunk sent at step s+1: each segment is forwarded the moment it is done.
    """
    rank, world = group.rank(), group.size()
    if world == 1:
        return
    left, right = (rank - 1) % world, (rank + 1) % world
    off = 1 if op is not None else 0
    steps = world - 1
    segs = [_segments(lo, hi, seg) for lo, hi in chunks]  # same on every rank
    stride = max(len(s) for s in segs) + 1  # tag = step * stride + segment index
    width = max(hi - lo for lo, hi in chunks)
    # Reduce-scatter receives partial sums into scratch (two buffers: step s+1's receives are
    # posted while step s is still being added). All-gather receives straight into place.
    scratch = [torch.empty(width, dtype=flat.dtype) for _ in range(2)] if op else None

    def post_receives(step: int) -> list[p2p.Message]:
        c = (rank + off + 1 + step) % world
        lo = chunks[c][0]
        msgs = []
        for k, (a, b) in enumerate(segs[c]):
            target = scratch[step % 2][a - lo : b - lo] if op else flat[a:b]
            msgs.append(p2p.irecv(target, right, group, tag + step * stride + k))
        return msgs

    first = (rank + off) % world
    sends = [p2p.isend(flat[a:b], left, group, tag + k) for k, (a, b) in enumerate(segs[first])]
    receives = post_receives(0)
    for step in range(steps):
        ahead = post_receives(step + 1) if step + 1 < steps else []
        c = (rank + off + 1 + step) % world
        lo = chunks[c][0]
        for k, (a, b) in enumerate(segs[c]):
            receives[k].wait()
            if op:
                ops.combine(op, flat[a:b], scratch[step % 2][a - lo : b - lo])  # mine OP acc
            if step + 1 < steps:  # forward this segment now: it is step+1's send
                sends.append(p2p.isend(flat[a:b], left, group, tag + (step + 1) * stride + k))
        receives = ahead
    p2p.wait_all(sends)


def _flat_inplace(tensor: torch.Tensor, body) -> torch.Tensor:
    """Run ``body(flat)`` on a contiguous 1-D view (or copy) of ``tensor``; copy back."""
    if tensor.is_contiguous():
        body(tensor.view(-1))
    else:  # non-contiguous: work on a copy, the caller's tensor still ends up with the result
        flat = tensor.contiguous().view(-1)
        body(flat)
        tensor.copy_(flat.view(tensor.shape))
    return tensor


def ring_all_reduce(tensor: torch.Tensor, op="sum", group=None, layout: str = "gloo"):
    """All-reduce ``tensor`` in place round the ring; returns it.

    Args:
        tensor: any shape (0-dim and empty too), a supported dtype; same numel and dtype on
            every rank.
        op: "sum", "avg", "max", "min", "product" or a ``torch.distributed.ReduceOp``.
        group: process group; ``None`` for the thread's or the default group.
        layout: "gloo" (bit-exact with gloo, pipelined segments) or "textbook"
            (one chunk per rank, one message per chunk).

    Returns:
        ``tensor``, now holding the reduction over all ranks.
    """
    g = groups.resolve(group)
    kind = "all_reduce" if layout == "gloo" else "textbook_ring_all_reduce"
    with p2p.operation(f"ring_all_reduce({layout})"):
        try:
            name = ops.normalize_op(op, "ring_all_reduce")
        except ValueError:
            name = None  # agree first, so every rank raises together, then raise here
        agree.agree(g, kind, tensor, name)
        if name is None:
            ops.normalize_op(op, "ring_all_reduce")
        ops.check_dtype(tensor, name, "ring_all_reduce")
        world = g.size()
        if tensor.numel() == 0 or world == 1:
            return tensor

        def body(flat: torch.Tensor) -> None:
            if layout == "gloo":
                chunks, seg = gloo_layout(flat.numel(), flat.element_size(), world)
            elif layout == "textbook":
                chunks, seg = textbook_layout(flat.numel(), world)
            else:
                raise ValueError(
                    f"ring_all_reduce: layout must be 'gloo' or 'textbook', got {layout!r}"
                )
            ring_pass(flat, chunks, seg, g, name)  # reduce-scatter
            ring_pass(flat, chunks, seg, g, None)  # all-gather
            ops.finish(name, flat, world)

        return _flat_inplace(tensor, body)
