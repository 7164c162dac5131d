"""Model-state memory per rank, read from the real tensors — and the ZeRO paper's formulas.

Measured, not computed: :func:`measure` sums the bytes of the distinct storages behind a
rank's parameters, gradients and optimizer state (views into one buffer count once, and a
view counts its whole buffer: padding and bucket slack are real memory). What each stage
holds (``plan.py``'s symbols):

=========  ==========================  ============================================
stage      formula (ZeRO paper)        where the tensors are
=========  ==========================  ============================================
DDP        ``(p + g + K) Ψ``           ``model.parameters()``, their ``.grad``, ``opt.state``
ZeRO-1     ``p Ψ + g Ψ + K Ψ / N``     same, but ``opt.optim.state`` (this rank's share)
ZeRO-2     ``p Ψ + (g + K) Ψ / N``     ``.grad`` shards in the buckets, ``opt.optim.state``
FSDP       ``(p + g + K) Ψ / N``       the local shards, their ``.grad``, ``opt.state``
=========  ==========================  ============================================

DDP's flat gradient buckets (``buckets``): with torch's default
``gradient_as_bucket_view=False`` a second full copy of the gradients on every DDP (and
ZeRO-1) rank, which the paper leaves out; with ``True`` ``.grad`` is a view into them. In
fp32 here, ``p = g = 4`` and ``K = 8``: the paper's 16 bytes per parameter replicated.

Test: ``pytest tests/test_memory.py``; see it: ``python lessons/18_memory_wall.py``
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

from minidp.fsdp.dtensor import local  # a DTensor's own rows: what this rank holds


@dataclasses.dataclass
class Usage:
    """Bytes of model states one rank holds."""

    params: int
    grads: int
    optimizer: int
    buckets: int = 0  # DDP's flat gradient buckets not already counted under grads

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.buckets


def storage_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (``None`` entries are skipped); a
    DTensor (FSDP's shards, their gradients and state) counts its local rows' storage."""
    seen: dict[int, int] = {}
    for t in map(local, tensors):
        if t is not None and t.numel() + t.untyped_storage().nbytes() > 0:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor in an optimizer's per-parameter state (moments, step counters, ...)."""
    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def bucket_buffers(model: torch.nn.Module) -> list[torch.Tensor]:
    """The flat gradient buckets of a ``minidp.DistributedDataParallel`` (else ``[]``).

    torch's DDP keeps its buckets in C++, out of Python's reach: a comm hook sees each one
    as ``bucket.buffer()`` (lesson 18 measures them that way).
    """
    reducer = getattr(model, "reducer", None)
    return [b.buffer for b in getattr(reducer, "buckets", [])]


def measure(model: torch.nn.Module, optimizer) -> Usage:
    """What this rank holds for ``model`` trained with ``optimizer`` (any stage above).

    ``optimizer`` is a torch optimizer (DDP, FSDP), minidp's ``ZeroRedundancyOptimizer``
    or ``Zero2Optimizer`` (their local share is ``optimizer.optim``). Call it after a
    step, before ``zero_grad``, when the gradients are still there. ``buckets``: the
    storages of minidp DDP's buckets that no ``.grad`` is a view of.
    """
    params = list(model.parameters())
    share = getattr(optimizer, "optim", optimizer)  # ZeRO: this rank's local optimizer
    if hasattr(optimizer, "gradient_shards"):  # ZeRO-2: the full .grad is gone by design
        grads = optimizer.gradient_shards()
    else:
        grads = [p.grad for p in params]
    grad_storages = {g.untyped_storage().data_ptr() for g in map(local, grads) if g is not None}
    buckets = [
        b for b in bucket_buffers(model) if b.untyped_storage().data_ptr() not in grad_storages
    ]
    return Usage(
        storage_bytes(params),
        storage_bytes(grads),
        storage_bytes(optimizer_tensors(share)),
        storage_bytes(buckets),
    )
