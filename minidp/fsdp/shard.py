"""How FSDP and ZeRO-2 cut a parameter: dim 0 in ``world`` chunks of ``ceil(dim0 / world)`` rows.

``torch.chunk``'s rule (FSDP2's), each shard padded to the first chunk's rows so that one
all-gather of equal pieces rebuilds every parameter (13 rows on 4 ranks: 4, 4, 4, and 1
+ 3 of padding): ``(T,)`` per rank, gathered into ``(world, T)``. Gradients go back by FSDP2's
``chunk_cat``: row ``r`` = piece ``r`` of every gradient. The engine's one padding rule:
ZeRO-2's buckets (``zero/zero2_layout.py``) cut their rows by it too.

``Shard(d)`` with ``d > 0`` (``shard_placement_fn``; even only, as FSDP2): the ``d`` chunks
stacked along dim 0 (:func:`to_rows`) are cut by the same dim-0 rule, as FSDP2 does.

Test: ``pytest tests/test_fsdp.py tests/test_zero2_train.py -k "torch_chunks or parameters"``
"""

from __future__ import annotations

import math

import torch


def to_rows(t: torch.Tensor, world: int, dim: int) -> torch.Tensor:
    """``t`` with its ``dim`` chunks stacked along dim 0: rank r's rows are its chunk."""
    return t if dim == 0 else torch.cat(t.chunk(world, dim), 0)


def from_rows(t: torch.Tensor, world: int, dim: int) -> torch.Tensor:
    """Inverse of :func:`to_rows`: the full tensor again."""
    return t if dim == 0 else torch.cat(t.chunk(world, 0), dim)


def shard_rows(dim0: int, world: int) -> int:
    """Rows every rank's (padded) shard has: the first ``torch.chunk`` chunk's length."""
    return -(-dim0 // world)


def shard_range(dim0: int, world: int, rank: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of the full tensor in ``rank``'s shard (empty past the end)."""
    rows = shard_rows(dim0, world)
    return min(rank * rows, dim0), min((rank + 1) * rows, dim0)


def shard_length(dim0: int, world: int, rank: int) -> int:
    """Rows of real data in ``rank``'s shard (the rest, up to ``shard_rows``, is padding)."""
    start, stop = shard_range(dim0, world, rank)
    return stop - start


def padded_shard(full: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """This rank's chunk of ``full`` along dim 0, zero-padded to ``shard_rows`` rows (a copy)."""
    start, stop = shard_range(full.shape[0], world, rank)
    out = full.new_zeros((shard_rows(full.shape[0], world), *full.shape[1:]))  # rank-local
    out[: stop - start].copy_(full[start:stop])
    return out


def chunk_cat(tensors: list[torch.Tensor], world: int, dtype: torch.dtype) -> torch.Tensor:
    """``(world, T)``: row r = piece r of every tensor (dim 0 padded), end to end, in dtype."""
    pieces = []
    for t in tensors:
        rows = shard_rows(t.shape[0], world)
        padded = t.new_zeros((rows * world, *t.shape[1:]), dtype=dtype)
        padded[: t.shape[0]].copy_(t)  # the cast to dtype happens here, like chunk_cat's
        pieces.append(padded.view(world, -1))  # (world, rows * row_numel)
    return torch.cat(pieces, dim=1)


def uncat(flat: torch.Tensor, shapes: list[torch.Size], world: int) -> list[torch.Tensor]:
    """Inverse of ``chunk_cat`` for a gathered ``(world, T)``: the full tensors (copies)."""
    out, offset = [], 0
    for shape in shapes:
        rows = shard_rows(shape[0], world)
        width = rows * math.prod(shape[1:])
        block = flat[:, offset : offset + width].reshape(world * rows, *shape[1:])
        out.append(block[: shape[0]])
        offset += width
    return out


def divide_factors(world: int, dtype: torch.dtype) -> tuple[float | None, float | None, str]:
    """(pre-divide, post-divide, op) of FSDP2's ``_get_gradient_divide_factors``: AVG for
    fp32/bf16; fp16 could overflow, so about sqrt(world) before the SUM, the rest after."""
    if dtype in (torch.float32, torch.bfloat16):
        return None, None, "avg" if world > 1 else "sum"
    pre = 1
    while world % pre == 0 and world / pre > pre:
        pre *= 2
    return float(pre), world / pre, "sum"
