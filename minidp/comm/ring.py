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

* ``textbook``: ``world`` near-equal chunks, each sent as one message — the book's ring
  (``minidp/textbook/collectives.py``), bit for bit: the version to read and to draw.
* ``gloo``: the exact schedule of gloo's CPU all-reduce, so the result is *bit-for-bit*
  equal to ``torch.distributed.all_reduce``. Chunk boundaries are multiples of gloo's
  *segment* (``min(total/2n, 1 MiB)`` bytes), and each chunk travels as several messages,
  every message forwarded as soon as it is summed — so sending one piece overlaps adding
  the next, which is where the speed comes from.

Chunk ``c`` is reduced in the order gloo uses: rank ``c-1`` sends its piece left, each
rank it reaches computes ``acc = mine + acc``, and it ends on rank ``c``:
``x[c] + (x[c+1] + (... + (x[c-2] + x[c-1])))`` (indices mod n). Floating-point addition is
not associative, so this order is what makes the bits match.

Small tensors, and why this ring is not used for them. The ring moves the fewest bytes,
but it takes ``2(n-1)`` *dependent* steps, and for a small tensor each step costs a
message latency and some Python, not bytes: every wait is also a chance for the waiting
thread to be woken late by the scheduler. So ``minidp.comm.all_reduce`` sends a tensor up
to 256 KiB whole, in one exchange, and adds the chunks locally in the order above
(``direct.py``: the same bits); this ring takes the bigger ones. What each costs, against
gloo's own all-reduce in the same run, and where the time goes (the header check, the data
pass): ``python -m minidp bench allreduce --breakdown`` and the README's table.
"""

from __future__ import annotations

import collections
import functools
import math

import torch

from minidp.comm import agree, ops, p2p
from minidp.comm import group as groups

MESSAGE_BYTES = 2 << 20  # largest message the pipelined ring sends


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


@functools.lru_cache(maxsize=256)
def schedule(
    chunks: tuple[tuple[int, int], ...], seg: int, rank: int, reduce_steps: int, copy_steps: int
) -> tuple[list, list, int, int]:
    """Who receives what, when: pure arithmetic on sizes, the same for every call with the
    same sizes — so it is computed once (cached) and a training loop's thousandth
    all-reduce of a bucket pays only for its messages.

    Returns ``slots``: every receive of the pass in order, ``(step, segment index, start,
    end)``; ``first``: the first step's sends ``(segment index, start, end)``; the tag
    ``stride``; and ``n_reduce``, how many receives add (the rest copy).
    """
    world = len(chunks)
    off = 1 if reduce_steps else 0
    segs = [_segments(lo, hi, seg) for lo, hi in chunks]  # same on every rank
    stride = max(len(s) for s in segs) + 1  # message tag = step * stride + segment index
    slots = [
        (step, k, a, b)
        for step in range(reduce_steps + copy_steps)
        for k, (a, b) in enumerate(segs[(rank + off + 1 + step) % world])
    ]
    first = [(k, a, b) for k, (a, b) in enumerate(segs[(rank + off) % world])]
    n_reduce = sum(1 for slot in slots if slot[0] < reduce_steps)
    return slots, first, stride, n_reduce


def ring_pass(
    flat: torch.Tensor,
    chunks: list[tuple[int, int]],
    seg: int,
    group,
    op: str | None,
    reduce_steps: int,
    copy_steps: int,
    window: int = 4,
) -> None:
    """Trips round the ring, in place on ``flat`` (1-D, contiguous, rank-local).

    The first ``reduce_steps`` steps add (reduce-scatter), the next ``copy_steps`` copy
    (all-gather). All-reduce is ``(n-1, n-1)``, reduce-scatter ``(n-1, 0)``, all-gather
    ``(0, n-1)``.

    At step s rank r sends chunk ``r+off+s`` left and receives chunk ``r+off+1+s`` from the
    right (off = 1 when the pass starts by reducing, else 0). So the chunk received at
    step s is exactly the chunk sent at step s+1 — even across the reduce-scatter →
    all-gather boundary, where the chunk a rank just finished is the first it shares —
    and each segment is forwarded the moment it is done: the ring never waits for a
    whole chunk, let alone a whole phase.

    Receives are posted ``window`` segments ahead, so the next segments are already
    arriving while this one is added. Reducing steps receive partial sums into a small
    ring of ``window`` segment buffers (reused: a chunk-sized scratch would cost a page
    fault per 4 KiB on every call); copying steps receive straight into place. Posting
    ahead is safe: a chunk's final value can only arrive after everything this rank sent
    of that chunk has been received downstream.
    """
    rank, world = group.rank(), group.size()
    steps = reduce_steps + copy_steps
    if world == 1 or steps == 0:
        return
    left, right = (rank - 1) % world, (rank + 1) % world
    slots, first, stride, n_reduce = schedule(tuple(chunks), seg, rank, reduce_steps, copy_steps)
    nbuf = min(window, n_reduce) or 1  # buffers: no more than the reducing receives
    width = max(b - a for _, _, a, b in slots[:n_reduce]) if n_reduce else 0  # <= seg
    scratch = torch.empty(
        nbuf * width, dtype=flat.dtype, device=flat.device
    )  # (nbuf * width,) rank-local

    def post(i: int) -> p2p.Work:
        step, k, a, b = slots[i]
        j = i % nbuf
        target = scratch[j * width : j * width + b - a] if step < reduce_steps else flat[a:b]
        return p2p.irecv(target, right, group, step * stride + k)

    # Receives first: a send leaves only once its receiver has posted the receive.
    # Reducing receives: a window of scratch buffers. Copying receives need no buffer of
    # their own, so they are all posted at once and the sender never waits for one.
    pending = collections.deque(post(i) for i in range(min(window, n_reduce)))
    pending.extend(post(i) for i in range(n_reduce, len(slots)))
    # The first step's sends: a send whose receive the peer has not posted yet waits inside
    # the transport, so when reducing, send only as many as the peer has buffers for and
    # release one more each time a buffer of ours frees up (the peer mirrors us).
    ahead = window if n_reduce else len(first)
    sends = [p2p.isend(flat[a:b], left, group, k) for k, a, b in first[:ahead]]
    for i, (step, k, a, b) in enumerate(slots):
        pending.popleft().wait()
        if step < reduce_steps:
            j = i % nbuf
            ops.combine(op, flat[a:b], scratch[j * width : j * width + b - a])  # mine OP acc
            if i + window < n_reduce:  # reuse the buffer just consumed
                pending.insert(window - 1, post(i + window))
            # release the next first-step send; after our last reducing receive, all the rest
            # (chunks may hold different numbers of segments: never leave one behind)
            release = first[i + ahead : i + ahead + 1] if i + 1 < n_reduce else first[i + ahead :]
            sends.extend(p2p.isend(flat[a0:b0], left, group, k0) for k0, a0, b0 in release)
        if step + 1 < steps:  # forward this segment now: it is step+1's send
            sends.append(p2p.isend(flat[a:b], left, group, (step + 1) * stride + k))
    p2p.wait_all(sends)


def unexpanded(tensor):
    """``tensor`` with every expanded dim (stride 0, ``x.expand(...)``) narrowed to size 1:
    each memory location once. ``None`` if nothing is expanded (or not a tensor).

    gloo reduces an expanded tensor's *memory*, one value per location (its logical
    copies all show the result), so minidp's collectives do the same on this view; the
    copies could not even be written back one by one.
    """
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
        return None
    dims = [d for d in range(tensor.dim()) if tensor.stride(d) == 0 and tensor.shape[d] > 1]
    for d in dims:
        tensor = tensor.narrow(d, 0, 1)
    return tensor if dims else None


@torch.no_grad()  # like c10d: a collective is not part of the autograd graph
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
    if layout not in ("gloo", "textbook"):
        raise ValueError(f"ring_all_reduce: layout must be 'gloo' or 'textbook', got {layout!r}")

    def body(flat: torch.Tensor, g, name: str) -> None:
        if layout == "gloo":
            gloo_ring(flat, g, name)
        else:
            chunks, seg = textbook_layout(flat.numel(), g.size())
            ring_pass(flat, chunks, seg, g, name, g.size() - 1, g.size() - 1)

    if layout == "textbook":
        return reduce_in_place(tensor, op, group, "ring_all_reduce(textbook)", body, -1)
    return reduce_in_place(tensor, op, group, "ring_all_reduce(gloo)", body, 0)


def gloo_ring(flat: torch.Tensor, group, op: str) -> None:
    """The data pass of ``ring_all_reduce`` alone, in place on ``flat`` (1-D, contiguous):
    no cross-rank check, no avg division. ``bench allreduce --breakdown`` times it."""
    world = group.size()
    chunks, seg = gloo_layout(flat.numel(), flat.element_size(), world)
    # Only the chunk boundaries decide the bits. How a chunk is cut into messages is
    # free: messages of up to 2 MiB (gloo uses 1 MiB) halve the Python overhead per byte;
    # faster in `python -m minidp bench allreduce`.
    seg = max(seg, MESSAGE_BYTES // flat.element_size())
    # reduce-scatter (n-1 steps) then all-gather (n-1 steps), as one pipelined pass
    ring_pass(flat, chunks, seg, group, op, world - 1, world - 1)


def reduce_in_place(tensor: torch.Tensor, op, group, who: str, body, algorithm: int):
    """What every all-reduce does around its algorithm ``body(flat, group, op_name)``.

    Resolve the group (non-members return at once), reduce an expanded tensor's memory,
    agree across ranks, skip empty tensors and worlds of one, run ``body`` on a flat
    contiguous view, then finish the op (avg divides). ``algorithm`` indexes
    ``agree.ALL_REDUCE_ALGORITHMS`` and travels in the header, so ranks that picked
    different algorithms fail the check instead of exchanging mismatched messages (-1: the
    textbook ring, a collective of its own kind). ``who`` names the call in errors.
    """
    if algorithm < 0:
        kind, extra, extra_name = "textbook_ring_all_reduce", 0, ""
    else:
        kind, extra, extra_name = "all_reduce", algorithm, "algorithm"
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "all_reduce"):
        return tensor
    memory = unexpanded(tensor)
    if memory is not None:
        reduce_in_place(memory, op, group, who, body, algorithm)
        return tensor
    with p2p.operation(who):
        name = agree.agree_reduce(g, kind, tensor, op, who.split("(")[0], extra, extra_name)
        world = g.size()
        if tensor.numel() == 0 or world == 1:
            return tensor

        def run(flat: torch.Tensor) -> None:
            body(flat, g, name)
            ops.finish(name, flat, world)

        return ops.flat_inplace(tensor, run)
