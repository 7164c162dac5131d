"""ZeRO-2's layout: which rows of each parameter a rank owns, and where they sit in a bucket.

* :class:`Piece` — one parameter, cut on dim 0 by FSDP's rule (``fsdp/shard.py``); each
  rank's rows start at ``offset`` in that rank's segment, padded to ``ceil(rows/W)`` rows.
* :class:`Bucket` — the parameters reduce-scattered together, and their buffers.

Any parameter works: 0-d (one row), zero-element (no rows), non-contiguous (slicing dim 0
is a view whatever the strides, so the in-place update still lands in the parameter).

Test: ``pytest tests/test_zero2_train.py -k parameters``
"""

from __future__ import annotations

import math

import torch

from minidp.fsdp.shard import shard_range, shard_rows


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` seen as rows along dim 0: a 0-d tensor becomes one row (a view either way)."""
    return t.unsqueeze(0) if t.dim() == 0 else t


class Piece:
    """One parameter inside a bucket: where its rows go in each rank's segment."""

    def __init__(self, p: torch.Tensor, offset: int, world: int, rank: int) -> None:
        rows = as_rows(p).shape[0]
        self.param, self.offset = p, offset
        self.row_numel = math.prod(as_rows(p).shape[1:])  # elements per row (0: no elements)
        self.padded = shard_rows(rows, world) * self.row_numel  # elements per rank segment
        self.ranges = [shard_range(rows, world, r) for r in range(world)]
        start, stop = self.ranges[rank]
        # this rank's rows: a leaf sharing the parameter's storage, so updates land in place
        self.shard = torch.nn.Parameter(as_rows(p.detach())[start:stop], requires_grad=True)

    def rank_rows(self, flat: torch.Tensor, r: int) -> torch.Tensor:
        """Rank ``r``'s rows of a flat (row-major, ``(numel,)``) copy of the parameter."""
        start, stop = self.ranges[r]
        return flat[start * self.row_numel : stop * self.row_numel]

    def write_rows(self, values: torch.Tensor, r: int) -> None:
        """Copy flat ``values`` into rank ``r``'s rows of the real parameter (any strides)."""
        start, stop = self.ranges[r]
        rows = as_rows(self.param.detach())[start:stop]  # a view of the parameter
        rows.copy_(values[: rows.numel()].view(rows.shape))


class Bucket:
    """Parameters reduce-scattered together; one send buffer while filling, one shard after."""

    def __init__(self, params: list[torch.Tensor], world: int, rank: int, dtype) -> None:
        self.pieces: list[Piece] = []
        offset = 0
        for p in params:
            self.pieces.append(Piece(p, offset, world, rank))
            offset += self.pieces[-1].padded
        self.segment = offset  # elements per rank
        self.shard_grad = torch.zeros(offset, dtype=dtype)  # (segment,) this rank's summed rows
        self.send: torch.Tensor | None = None  # (world * segment,) only while filling
        self.seen: set[int] = set()  # pieces whose gradient is in `send` (this backward)
        self.reduced = False  # reduce-scattered at least once since the last step
        self.accumulate = False  # add to shard_grad instead of overwriting (no zero_grad between)

    def grad_rows(self, piece: Piece) -> torch.Tensor:
        """This rank's rows of ``piece``'s reduced gradient: a view of the shard buffer."""
        return self.shard_grad[piece.offset : piece.offset + piece.shard.numel()].view_as(
            piece.shard
        )

    def reset_inflight(self) -> None:
        self.send, self.seen = None, set()
