"""Check, before any data moves, that every rank is calling the same collective.

Why this exists: a ring all-reduce in which rank 1 passes 10 elements and rank 0 passes
12 does not fail by itself — it hangs (a receive waits for bytes that never come) or,
worse, finishes with garbage. So every minidp collective first exchanges a small header
(which collective, numel, dtype, op, shape, and one collective-specific value such as the
broadcast source) and every rank raises the *same* :class:`MismatchError` naming what
differs on which rank.

The exchange is the parameter-server pattern on a few bytes: ranks send their header to
rank 0, rank 0 sends the table of all headers back — two message latencies whatever the
world size, and negligible next to the data for anything but tiny tensors.

Test: ``pytest tests/test_collectives.py -k mismatch``
"""

from __future__ import annotations

import torch

from minidp.comm import p2p
from minidp.comm.errors import MismatchError

KINDS = (
    "all_reduce",
    "naive_all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "barrier",
    "textbook_ring_all_reduce",
)
_OPS = ("sum", "avg", "max", "min", "product")
_DTYPES = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
_MAX_DIMS = 8
_HEADER = 6 + _MAX_DIMS  # kind, numel, dtype, op, extra, ndim, dims...
HEADER_TAG = 1 << 30  # header messages never match data messages (those use small tags)


def _encode(kind: str, tensor: torch.Tensor | None, op: str | None, extra: int) -> torch.Tensor:
    h = torch.full((_HEADER,), -1, dtype=torch.int64)
    h[0] = KINDS.index(kind)
    if tensor is not None:
        h[1] = tensor.numel()
        h[2] = _DTYPES.index(tensor.dtype) if tensor.dtype in _DTYPES else 99
        h[5] = tensor.dim()
        for i, d in enumerate(tensor.shape[:_MAX_DIMS]):
            h[6 + i] = d
    h[3] = _OPS.index(op) if op in _OPS else -1
    h[4] = extra
    return h


def _describe(h: torch.Tensor, extra_name: str) -> str:
    kind = KINDS[int(h[0])]
    parts = [kind]
    if int(h[1]) >= 0:
        dims = [int(d) for d in h[6 : 6 + min(int(h[5]), _MAX_DIMS)]]
        dtype = _DTYPES[int(h[2])] if int(h[2]) < len(_DTYPES) else "unsupported dtype"
        parts.append(
            f"shape {tuple(dims)} ({int(h[1])} elements) {str(dtype).replace('torch.', '')}"
        )
    if int(h[3]) >= 0:
        parts.append(f"op {_OPS[int(h[3])]}")
    if extra_name:
        parts.append(f"{extra_name}={int(h[4])}")
    return ", ".join(parts)


def agree(
    group,
    kind: str,
    tensor: torch.Tensor | None = None,
    op: str | None = None,
    extra: int = 0,
    extra_name: str = "",
) -> None:
    """Raise :class:`MismatchError` on every rank unless all ranks pass equal headers."""
    rank, world = group.rank(), group.size()
    if world == 1:
        return
    mine = _encode(kind, tensor, op, extra)
    table = torch.empty((world, _HEADER), dtype=torch.int64)  # (world, header) on every rank
    if rank == 0:
        table[0] = mine
        msgs = [p2p.irecv(table[r], r, group, HEADER_TAG) for r in range(1, world)]
        p2p.wait_all(msgs)
        p2p.wait_all([p2p.isend(table, r, group, HEADER_TAG + 1) for r in range(1, world)])
    else:
        p2p.isend(mine, 0, group, HEADER_TAG).wait()
        p2p.irecv(table, 0, group, HEADER_TAG + 1).wait()
    # Every rank now holds the same table, so every rank reaches the same verdict.
    # Shapes may differ (all_reduce only needs equal numel), so compare the first 5 fields.
    for r in range(1, world):
        if not torch.equal(table[r, :5], table[0, :5]):
            raise MismatchError(
                f"{kind}: rank {r} passed [{_describe(table[r], extra_name)}] but rank 0 passed "
                f"[{_describe(table[0], extra_name)}] — every rank must call the same "
                "collective, in the same order, with the same number of elements, dtype and op"
            )
