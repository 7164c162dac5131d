"""Ring all-reduce = reduce-scatter + all-gather, around a ring of send/recv.

Run it: ``python -m minidp demo ring --world-size 4 --numel 12``
Test it: ``pytest tests/test_collectives.py -k ring``

Every rank sends to its left neighbour and receives from its right: ``world-1``
reduce-scatter steps leave chunk ``c`` reduced on rank ``c``, then ``world-1`` all-gather
steps pass it round. Each rank sends ``2(n-1)/n·S`` bytes whatever ``n`` is. The book's
ring (``minidp/textbook/collectives.py``, what the demo runs) lists what this one adds:
gloo's schedule, bit for bit ``torch.distributed.all_reduce`` — chunks cut on gloo's
segments (:func:`gloo_layout`), chunk ``c`` summed as ``x[c] + (x[c+1] + (... + (x[c-2] +
x[c-1])))`` (indices mod n; float addition is not associative), each segment forwarded as
soon as it is summed (:func:`ring_pass`), so sending one overlaps adding the next.
"""

from __future__ import annotations

import collections
import functools
import math

import torch

from minidp.comm import agree, ops, p2p
from minidp.comm import group as groups

MESSAGE_BYTES = 2 << 20  # largest message the pipelined ring sends


@functools.lru_cache(maxsize=256)  # asked for on every call; the list is shared: read only
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


def _segments(lo: int, hi: int, seg: int) -> list[tuple[int, int]]:
    return [(s, min(s + seg, hi)) for s in range(lo, hi, seg)]


@functools.lru_cache(maxsize=256)
def schedule(
    chunks: tuple[tuple[int, int], ...], seg: int, rank: int, reduce_steps: int, copy_steps: int
) -> tuple[list, list, int, int]:
    """Who receives what, when (cached: pure arithmetic on sizes): ``slots``, every receive
    as ``(step, segment, start, end)``; ``first``, the first step's sends as ``(segment,
    start, end)``; the tag ``stride``; ``n_reduce``, how many receives add."""
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
    """Trips round the ring, in place on ``flat`` (1-D, contiguous, rank-local):
    ``reduce_steps`` adding, then ``copy_steps`` copying (all-reduce ``(n-1, n-1)``,
    reduce-scatter ``(n-1, 0)``, all-gather ``(0, n-1)``).

    At step s rank r sends chunk ``r+off+s`` and receives ``r+off+1+s`` (off = 1 when
    reducing first): what arrives is the next step's send, so each segment is forwarded the
    moment it is done. Receives are posted ``window`` segments ahead, partial sums into
    reused segment buffers (a chunk-sized scratch would page-fault on every call).
    """
    rank, world = group.rank(), group.size()
    steps = reduce_steps + copy_steps
    if world == 1 or steps == 0:
        return
    left, right = (rank - 1) % world, (rank + 1) % world
    slots, first, stride, n_reduce = schedule(tuple(chunks), seg, rank, reduce_steps, copy_steps)
    nbuf = min(window, n_reduce) or 1  # buffers: no more than the reducing receives
    width = max(b - a for _, _, a, b in slots[:n_reduce]) if n_reduce else 0  # <= seg
    scratch = torch.empty(nbuf * width, dtype=flat.dtype, device=flat.device)  # rank-local

    def post(i: int) -> p2p.Work:
        step, k, a, b = slots[i]
        j = i % nbuf
        target = scratch[j * width : j * width + b - a] if step < reduce_steps else flat[a:b]
        return p2p.irecv(target, right, group, step * stride + k)

    # Receives first: a send leaves only once its receiver has posted the receive. Copying
    # receives need no buffer: all are posted at once (safe: a chunk's final value arrives
    # only after downstream has received all this rank sent of it).
    pending = collections.deque(post(i) for i in range(min(window, n_reduce)))
    pending.extend(post(i) for i in range(n_reduce, len(slots)))
    # A send whose receive is not posted waits in the transport: when reducing, send only as
    # many as the peer has buffers for, one more as each of ours frees (the peer mirrors us).
    ahead = window if n_reduce else len(first)
    sends = [p2p.isend(flat[a:b], left, group, k) for k, a, b in first[:ahead]]
    for i, (step, k, a, b) in enumerate(slots):
        pending.popleft().wait()
        if step < reduce_steps:
            j = i % nbuf
            ops.combine(op, flat[a:b], scratch[j * width : j * width + b - a])  # mine OP acc
            if i + window < n_reduce:  # reuse the buffer just consumed
                pending.insert(window - 1, post(i + window))
            # next first-step send; after the last reducing one, all left (chunk lengths differ)
            release = first[i + ahead : i + ahead + 1] if i + 1 < n_reduce else first[i + ahead :]
            sends.extend(p2p.isend(flat[a0:b0], left, group, k0) for k0, a0, b0 in release)
        if step + 1 < steps:  # forward this segment now: it is step+1's send
            sends.append(p2p.isend(flat[a:b], left, group, (step + 1) * stride + k))
    p2p.wait_all(sends)


def unexpanded(tensor):
    """``tensor`` with every expanded dim (stride 0) narrowed to size 1, else ``None``: like
    gloo, the collectives reduce an expanded tensor's *memory*, once per location."""
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
        return None
    dims = [d for d in range(tensor.dim()) if tensor.stride(d) == 0 and tensor.shape[d] > 1]
    for d in dims:
        tensor = tensor.narrow(d, 0, 1)
    return tensor if dims else None


def ring_all_reduce(tensor: torch.Tensor, op="sum", group=None) -> torch.Tensor:
    """All-reduce ``tensor`` (any shape; same numel and dtype on every rank) in place round
    the ring, bit-exact with gloo; returns it. ``op``: "sum", "avg", "max", "min",
    "product" or a ``ReduceOp``; ``group``: ``None`` for the thread's or the default group.
    """
    return reduce_in_place(tensor, op, group, "ring_all_reduce(gloo)", _ring_body, 0)


def _ring_body(flat: torch.Tensor, g, name: str, _payloads) -> None:
    gloo_ring(flat, g, name)


def gloo_ring(flat: torch.Tensor, group, op: str) -> None:
    """``ring_all_reduce``'s data pass alone, in place on ``flat``: no check, no division."""
    world = group.size()
    chunks, seg = gloo_layout(flat.numel(), flat.element_size(), world)
    # only chunk boundaries decide the bits: 2 MiB messages (gloo: 1 MiB) halve the overhead
    seg = max(seg, MESSAGE_BYTES // flat.element_size())
    # reduce-scatter (n-1 steps) then all-gather (n-1 steps), as one pipelined pass
    ring_pass(flat, chunks, seg, group, op, world - 1, world - 1)


def reduce_in_place(tensor: torch.Tensor, op, group, who: str, body, algorithm: int, carry=False):
    """Every all-reduce around its algorithm ``body(flat, group, op_name, payloads)``:
    resolve the group, agree across ranks, run ``body`` on a flat contiguous view (or copy),
    finish the op. ``algorithm`` (``agree.ALL_REDUCE_ALGORITHMS``' index) travels in the
    header, so ranks that picked different ones fail the check; ``carry``: the data
    travels with the header too (``payloads``: every peer's)."""
    if torch.is_grad_enabled() and getattr(tensor, "requires_grad", False):
        # like c10d, a collective is not part of the autograd graph. Only here: torch's
        # no_grad costs more than the rest of a small all-reduce's Python, and a tensor
        # that requires no gradient makes no graph anyway
        with torch.no_grad():
            return reduce_in_place(tensor, op, group, who, body, algorithm, carry)
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "all_reduce"):
        return tensor
    memory = unexpanded(tensor)
    if memory is not None:
        reduce_in_place(memory, op, group, who, body, algorithm, carry)
        return tensor
    with p2p.operation(who):
        flat = None  # (numel,) contiguous: a view of tensor, or a copy of a strided one
        if agree.input_ok(tensor):
            flat = tensor if tensor.dim() == 1 else tensor.reshape(-1)  # (a 1-D one as is)
            if not flat.is_contiguous():
                flat = flat.contiguous()
            if flat.numel() == 1:  # one element may keep any stride (an expanded dim narrowed
                flat = flat.as_strided((1,), (1,))  # to 1): a byte view of it needs stride 1
        payload = flat if carry and flat is not None and flat.numel() else None
        name, payloads = agree.agree_reduce(
            g, "all_reduce", tensor, op, who.split("(")[0], algorithm, "algorithm", payload
        )
        world = g.size()
        if tensor.numel() == 0 or world == 1:
            return tensor
        body(flat, g, name, payloads)
        ops.finish(name, flat, world)
        if not tensor.is_contiguous():
            tensor.copy_(flat.view(tensor.shape))
        return tensor
