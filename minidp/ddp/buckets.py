"""Buckets: which gradients travel together in one all-reduce, and the flat buffer they share.

A bucket (25 MiB by default) is reduced while backward still computes earlier layers. Its
layout also decides the bits (gloo's ring chunks a buffer by its length, and a chunk's
first rank decides the rounding), so minidp builds exactly torch's buckets:
:func:`compute_bucket_assignment_by_size`, the limits of :class:`BucketCaps`, and
:class:`Bucket`'s flat ``(numel,)`` buffer with one view per parameter. The book's buckets
(one cap, no rebuild): ``minidp/textbook/ddp.py``.

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

    Per (dtype, device), a bucket closes once its bytes reach its limit: ``size_limits[0]``
    for the first, then the next, the last repeating. ``expect_sparse_gradient[index]``: a
    bucket alone; ``tensor_indices``: the index to report for ``tensors[i]``. Returns the
    buckets (tensor indices) and each one's limit; without ``tensor_indices`` sorted by
    smallest index, else in closing order with the still-open ones last.
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
    # per (dtype, device): the open bucket [indices, bytes, limit], its place in size_limits
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
    # still-open buckets last, newest key first (torch's hash-map order; one dtype: one key)
    for indices, _, limit in reversed(open_buckets.values()):
        if indices:
            result.append((indices, limit))
    if not tensor_indices:
        # forward order; DDP reverses the list into gradient-ready order
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
        """Limits for the first layout: without ``find_unused_parameters``, ONE bucket as in
        torch (parameter order need not be gradient order; the rebuild uses the real one)."""
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
    """One view per parameter into ``flat``; a dense one (e.g. channels-last) keeps its strides,
    as in torch: an element's place decides its ring chunk, and so its summation order."""
    out = []
    for p, off in zip(params, offsets):
        if _is_dense(p):
            out.append(flat.as_strided(p.shape, p.stride(), flat.storage_offset() + off))
        else:
            out.append(flat.narrow(0, off, p.numel()).view(p.shape))
    return out


class Bucket:
    """A group of parameters whose gradients are reduced together in one flat buffer."""

    def __init__(self, index: int, indices: list[int], params: list[torch.Tensor]) -> None:
        self.index = index  # launch order: 0 = launched first = last layers
        self.indices = indices  # into DDP's parameter list, in buffer order
        self.params = params
        self.offsets: list[int] = []  # each parameter's slot start in buffer, in elements
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
    """``(buckets, locator)`` for ``assignment``: ``locator[param] = (bucket, position)``."""
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
    """Every rank adopts rank 0's layout (gradient-ready order may differ between ranks):
    ``[indices..., n_buckets, lengths...]`` padded to ``2 * n_params + 1``, a known size."""
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


def broadcast_coalesced(tensors: list[torch.Tensor], group, src: int = 0) -> None:
    """Broadcast ``tensors`` from group rank ``src``: one flat message per dtype, not one per
    tensor (DDP's start-up state and its buffers before each forward)."""
    if group.size() == 1:
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    with torch.no_grad():
        for same in by_dtype.values():
            flat = torch.cat([t.reshape(-1) for t in same])  # (sum numel,) rank-local
            broadcast(flat, group=group, group_src=src)
            if group.rank() == src:
                continue  # the source already holds these values
            offset = 0
            for t in same:
                t.copy_(flat[offset : offset + t.numel()].view(t.shape))
                offset += t.numel()
