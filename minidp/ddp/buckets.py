"""Buckets: which gradients travel together in one all-reduce, and the flat buffer they share.

Why buckets: one all-reduce per parameter pays the per-message latency hundreds of times;
one all-reduce for the whole model cannot start before the *last* gradient is ready. A
bucket of ~25 MiB is the compromise from the PyTorch DDP paper: big enough to use the
link well, small enough that the first bucket (the last layers) can be reduced while
backward still computes the first layers.

The rules below decide the bits, not only the speed: gloo's ring cuts each flat buffer
into chunks whose size depends on the buffer's length, and which rank's value starts a
chunk's sum decides the rounding. So minidp must build *exactly* torch's buckets:

* :func:`compute_bucket_assignment_by_size`: walk the tensors in order, one open bucket
  per (dtype, device); add the tensor, and close the bucket once its size is ``>=`` the
  current limit (so a bucket may exceed its cap), then move on to the next limit of the
  list (the last limit repeats). Without ``tensor_indices`` the buckets are sorted by
  their smallest tensor index.
* :class:`BucketCaps`: ``bucket_cap_mb`` (default 25 MiB) and the first-bucket cap (1 MiB,
  but only when ``bucket_cap_mb`` was *not* given; otherwise equal to the cap), and which
  limit lists the first layout and the rebuild use.
* :class:`Bucket`: the flat buffer ``(numel,)`` and one view per parameter into it.

Test: ``pytest tests/test_buckets.py``
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

import torch

from minidp.comm import broadcast

DEFAULT_CAP_MB = 25
DEFAULT_FIRST_CAP_BYTES = 1024 * 1024  # small first bucket: its all-reduce starts sooner
MB = 1024 * 1024


def compute_bucket_assignment_by_size(
    tensors: Sequence[torch.Tensor],
    size_limits: Sequence[int],
    expect_sparse_gradient: Sequence[bool] = (),
    tensor_indices: Sequence[int] = (),
) -> tuple[list[list[int]], list[int]]:
    """Group tensors into buckets by size, like torch's ``_compute_bucket_assignment_by_size``.

    Args:
        tensors: the tensors (only numel, dtype and device are read), in the order to walk.
        size_limits: bucket caps in bytes; the first bucket of each (dtype, device) uses
            ``size_limits[0]``, the next one ``size_limits[1]``, ... the last limit repeats.
        expect_sparse_gradient: per tensor *index*, True puts it alone in a bucket
            (limit 0), as torch does for sparse embeddings.
        tensor_indices: the index to report for ``tensors[i]`` (the rebuild passes the
            parameters in gradient-ready order with their original indices). Empty: ``i``.

    Returns:
        ``(buckets, limits)``: lists of tensor indices, and the limit each bucket was
        filled against. Without ``tensor_indices`` buckets are sorted by smallest index;
        with them, closed buckets come in closing order, then the still-open ones.
    """
    if len(tensors) == 0:
        raise ValueError("compute_bucket_assignment_by_size: expected at least one tensor, got 0")
    if len(size_limits) == 0:
        raise ValueError("compute_bucket_assignment_by_size: expected at least one size limit")
    if tensor_indices and len(tensor_indices) != len(tensors):
        raise ValueError(
            f"compute_bucket_assignment_by_size: tensor_indices has {len(tensor_indices)} "
            f"entries but there are {len(tensors)} tensors — give one index per tensor"
        )
    result: list[tuple[list[int], int]] = []
    # Open bucket per (dtype, device): [indices, bytes, limit], plus where in size_limits
    # that key has got to. Keys stay in the dict once seen (insertion order = first seen).
    open_buckets: dict[tuple, list] = {}
    limit_pos: dict[tuple, int] = {}
    for i, tensor in enumerate(tensors):
        index = tensor_indices[i] if tensor_indices else i
        if expect_sparse_gradient and expect_sparse_gradient[index]:
            result.append(([index], 0))  # sparse gradients never share a bucket
            continue
        key = (tensor.dtype, tensor.device)
        bucket = open_buckets.setdefault(key, [[], 0, 0])
        pos = limit_pos.setdefault(key, 0)
        bucket[0].append(index)
        bucket[1] += tensor.numel() * tensor.element_size()
        bucket[2] = size_limits[pos]
        if bucket[1] >= bucket[2]:  # ">=": the tensor that crosses the cap stays in
            result.append((bucket[0], bucket[2]))
            open_buckets[key] = [[], 0, 0]
            limit_pos[key] = min(pos + 1, len(size_limits) - 1)
    # Still-open buckets go last. torch emits them in its hash map's order, which for a
    # handful of (dtype, device) keys is usually newest key first; with one dtype (every
    # real model we test) there is only one, so the order cannot differ.
    for indices, _, limit in reversed(open_buckets.values()):
        if indices:
            result.append((indices, limit))
    if not tensor_indices:
        # Tensors are in forward order, so sorting by smallest index keeps the buckets in
        # the order their gradients will become ready (after DDP reverses the list).
        result.sort(key=lambda b: min(b[0]))
    return [b[0] for b in result], [b[1] for b in result]


@dataclasses.dataclass(frozen=True)
class BucketCaps:
    """Bucket size limits, in bytes, from ``bucket_cap_mb`` the way torch derives them."""

    cap: int
    first_cap: int

    @classmethod
    def from_mb(cls, bucket_cap_mb: float | None) -> BucketCaps:
        if bucket_cap_mb is None:
            # Only the default gets the small first bucket: the user who chose a cap gets it.
            return cls(DEFAULT_CAP_MB * MB, DEFAULT_FIRST_CAP_BYTES)
        if not isinstance(bucket_cap_mb, (int, float)) or bucket_cap_mb <= 0:
            raise ValueError(
                f"DistributedDataParallel: bucket_cap_mb must be a positive number of MiB, "
                f"got {bucket_cap_mb!r}. Hint: 25 is torch's default; 0.1 makes tiny buckets"
            )
        cap = int(bucket_cap_mb * MB)
        return cls(cap, cap)

    def initial_limits(self, find_unused_parameters: bool) -> list[int]:
        """Limits for the first layout, before any backward has shown the real order.

        Without ``find_unused_parameters`` torch puts everything in ONE bucket for the
        first iteration: parameter order is not gradient order (think of a model whose
        ``forward`` uses its layers in another order than ``__init__`` made them), and a
        wrong order could launch an all-reduce that waits on a gradient computed last.
        The buckets are rebuilt in the order actually observed (``rebuild_limits``).
        """
        if not find_unused_parameters:
            return [sys.maxsize]
        if self.first_cap < self.cap:
            return [self.first_cap, self.cap]
        return [self.cap]

    def rebuild_limits(self) -> list[int]:
        """Limits for the rebuild in gradient-ready order (after the first backward)."""
        return [self.first_cap, self.cap]


def _is_dense(t: torch.Tensor) -> bool:
    """True if ``t``'s elements fill a block of memory with no gaps or overlaps."""
    if t.is_contiguous():
        return True
    dims = sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def _views(flat: torch.Tensor, params: list[torch.Tensor], offsets: list[int]) -> list:
    """One view per parameter into ``flat``, laid out like the parameter in memory.

    A dense parameter (contiguous or, e.g., channels-last) gets a view with its own
    strides, so element k of the parameter's memory is element ``offset + k`` of the
    bucket, as in torch: the position decides which ring chunk (and so which summation
    order) an element gets.
    """
    out = []
    for p, off in zip(params, offsets):
        if _is_dense(p):
            out.append(flat.as_strided(p.shape, p.stride(), flat.storage_offset() + off))
        else:
            out.append(flat.narrow(0, off, p.numel()).view(p.shape))
    return out


class Bucket:
    """A group of parameters whose gradients are reduced together in one flat buffer.

    Attributes:
        index: position in launch order (0 = launched first = last layers).
        indices: parameter indices (into DDP's parameter list), in buffer order.
        params: the parameters themselves, same order.
        offsets: start of each parameter's slot in ``buffer``, in elements.
        buffer: ``(numel,)`` rank-local flat gradient buffer; all-reduced in place.
        views: per parameter, a view of ``buffer`` shaped like the parameter.
    """

    def __init__(self, index: int, indices: list[int], params: list[torch.Tensor]) -> None:
        self.index = index
        self.indices = indices
        self.params = params
        self.offsets: list[int] = []
        total = 0
        for p in params:
            self.offsets.append(total)
            total += p.numel()
        p0 = params[0]
        self.buffer = torch.empty(total, dtype=p0.dtype, device=p0.device)  # (numel,) rank-local
        self.views = _views(self.buffer, params, self.offsets)

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def views_of(self, result: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of ``result`` (a comm hook's output, same numel as buffer)."""
        if result is self.buffer:
            return self.views
        return _views(result.reshape(-1), self.params, self.offsets)

    def __repr__(self) -> str:
        return f"Bucket(index={self.index}, params={self.indices}, bytes={self.nbytes})"


def build_buckets(
    assignment: list[list[int]], params: list[torch.Tensor]
) -> tuple[list[Bucket], list[tuple[int, int]]]:
    """Make the buckets for ``assignment``; also where each parameter lives.

    Returns:
        ``(buckets, locator)`` with ``locator[param_index] = (bucket index, position)``.
    """
    buckets = [Bucket(b, idx, [params[i] for i in idx]) for b, idx in enumerate(assignment)]
    locator: list[tuple[int, int]] = [(-1, -1)] * len(params)
    for bucket in buckets:
        for pos, i in enumerate(bucket.indices):
            locator[i] = (bucket.index, pos)
    return buckets, locator


def bucket_of_params(assignment: list[list[int]], n_params: int) -> list[int]:
    """The inverse of ``assignment``: ``result[param_index]`` = the bucket holding it."""
    bucket_of = [0] * n_params
    for b, indices in enumerate(assignment):
        for i in indices:
            bucket_of[i] = b
    return bucket_of


def rank0_assignment(assignment: list[list[int]], n_params: int, group) -> list[list[int]]:
    """Every rank adopts rank 0's layout (gradient-ready order may differ between ranks).

    One broadcast of ``[indices..., number of buckets, bucket lengths...]``, padded to a
    size every rank knows (``2 * n_params + 1``), so it cannot mismatch.
    """
    packed = torch.full((2 * n_params + 1,), -1, dtype=torch.int64)
    packed[:n_params] = torch.tensor([i for b in assignment for i in b])
    packed[n_params] = len(assignment)
    packed[n_params + 1 : n_params + 1 + len(assignment)] = torch.tensor(
        [len(b) for b in assignment]
    )
    broadcast(packed, group=group, group_src=0)
    flat = packed[:n_params].tolist()
    sizes = packed[n_params + 1 : n_params + 1 + int(packed[n_params])].tolist()
    out, start = [], 0
    for size in sizes:
        out.append(flat[start : start + size])
        start += size
    return out
