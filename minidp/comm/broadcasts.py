"""Broadcast: the root sends the whole tensor to every rank — one at a time, or several at once.

Run it: ``python -m minidp bench zero --breakdown`` (ZeRO-1's optimizer step broadcasts)
Test it: ``pytest tests/test_broadcast_async.py tests/test_collectives.py -k broadcast``

:func:`broadcast_many` is ZeRO-1's step (every rank broadcasts what it owns): one header
check, then every message posted from and into its own tensor. Not a loop of ``async_op``
calls (each header would queue behind the megabytes on gloo's one connection per pair),
nor one flat buffer per owner (fresh memory every step page-faults more than it saves).
"""

from __future__ import annotations

import zlib

import torch

from minidp.comm import agree, p2p
from minidp.comm import group as groups
from minidp.comm.ring import unexpanded


def _check_src(src: int, world: int, who: str) -> None:
    if not isinstance(src, int) or not 0 <= src < world:
        raise ValueError(
            f"{who}: src must be a rank in [0, {world - 1}] for this group of {world}, got {src!r}"
        )


def _group_root(g, src, group_src, who: str) -> int:
    """The root's group rank from ``src`` (global, like torch) or ``group_src`` (in-group)."""
    if src is not None and group_src is not None:
        raise ValueError(
            f"{who}: got both src={src!r} and group_src={group_src!r} — expected one of them "
            "(src: a global rank; group_src: a rank within the group)"
        )
    if group_src is not None:
        return group_src
    return groups.to_group_rank(g, 0 if src is None else src, who, "src")


def _check(tensor: torch.Tensor, src, group_src, g) -> int:
    """Every rank agrees on this broadcast (header exchange), then on its root; returns it."""
    try:
        root, error = _group_root(g, src, group_src, "broadcast"), None
    except ValueError as exc:  # agree first, so every rank raises together
        root, error = -1, exc
    extra = root if isinstance(root, int) else -1
    agree.agree(g, "broadcast", tensor, None, extra=extra, extra_name="group_src")
    if error is not None:
        raise error
    _check_src(root, g.size(), "broadcast")
    return root


def _post(tensor: torch.Tensor, root: int, g, tag: int = 0) -> p2p.Pending:
    """Post this rank's messages of a checked broadcast; the handle finishes it."""
    rank, world = g.rank(), g.size()
    works, finish = [], None
    if world > 1 and tensor.numel() > 0:
        contiguous = tensor.is_contiguous()
        flat = (tensor if contiguous else tensor.contiguous()).view(-1)  # else a copy
        if rank == root:
            works = [p2p.isend(flat, r, g, tag) for r in range(world) if r != root]
        else:
            works = [p2p.irecv(flat, root, g, tag)]
            if not contiguous:  # received into a copy: write it back
                finish = lambda: tensor.copy_(flat.view(tensor.shape))  # noqa: E731
    return p2p.Pending(works, "broadcast", finish)


@torch.no_grad()  # like c10d: a collective is not part of the autograd graph
def broadcast(
    tensor: torch.Tensor,
    src: int | None = None,
    group=None,
    group_src: int | None = None,
    async_op: bool = False,
):
    """Copy ``tensor`` from the root to every rank, in place; returns it (``async_op``: a
    handle; until its ``wait()`` the tensor must not be read, nor changed on the root).
    The root is ``src``, a *global* rank as in torch (default 0), or ``group_src``."""
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "broadcast"):
        return p2p.Pending([], "broadcast") if async_op else tensor
    memory = unexpanded(tensor)  # x.expand(...): each memory location once, like gloo
    with p2p.operation("broadcast"):
        root = _check(tensor if memory is None else memory, src, group_src, g)
        handle = _post(tensor if memory is None else memory, root, g)
    if async_op:
        return handle
    handle.wait()
    return tensor


@torch.no_grad()
def broadcast_many(
    tensors: list[torch.Tensor], group_srcs: list[int], group=None
) -> list[torch.Tensor]:
    """``broadcast(tensors[i], group_src=group_srcs[i])`` for every i, as one step; returns
    ``tensors``. The header carries a CRC-32 of every (root, shape, dtype)."""
    if not isinstance(tensors, (list, tuple)) or len(tensors) != len(group_srcs):
        raise ValueError(
            f"broadcast_many: expected a list of tensors and one root per tensor, got "
            f"{type(tensors).__name__} and {len(group_srcs)} roots"
        )
    g = groups.resolve(group)
    if groups.skip_if_not_member(g, "broadcast"):
        return tensors
    world = g.size()
    bad = [t for t in tensors if not agree.input_ok(t)]
    memories = [] if bad else [t if (m := unexpanded(t)) is None else m for t in tensors]
    layout = [(r, tuple(t.shape), str(t.dtype)) for r, t in zip(group_srcs, memories)]
    fingerprint = zlib.crc32(repr(layout).encode()) & 0x7FFFFFFF
    with p2p.operation("broadcast_many"):
        # a bad tensor travels as the header's tensor: every rank raises, that one precisely
        summary = bad[0] if bad else torch.empty(len(tensors), dtype=torch.int64)
        agree.agree(g, "broadcast_many", summary, None, fingerprint, "fingerprint")
        for r in group_srcs:
            _check_src(r, world, "broadcast_many")
        handles = [_post(t, r, g, i) for i, (t, r) in enumerate(zip(memories, group_srcs))]
    for handle in handles:
        handle.wait()
    return tensors
