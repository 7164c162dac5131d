"""FSDP2's policies: ``MixedPrecisionPolicy`` (which dtype FSDP gathers, computes and reduces
in) and ``OffloadPolicy`` / ``CPUOffloadPolicy`` (where the shards live), torch's fields.

The sharded parameters (what the optimizer steps) keep their dtype; ``param_dtype`` is the
all-gather's and the unsharded parameters', ``reduce_dtype`` the reduce-scatter's (results
cast back into ``.grad``); ``None``: the installed torch's rule.

Test: ``pytest tests/test_fsdp.py -k "bf16 or fp16"``
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """``param_dtype``: gather/compute dtype; ``reduce_dtype``: gradient reduction dtype."""

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    output_dtype: torch.dtype | None = None  # cast a unit's floating-point outputs to this
    cast_forward_inputs: bool = True  # cast a unit's floating-point inputs to param_dtype

    def __post_init__(self) -> None:
        for field in ("param_dtype", "reduce_dtype", "output_dtype"):
            value = getattr(self, field)
            if value is not None and not (
                isinstance(value, torch.dtype) and value.is_floating_point
            ):
                raise ValueError(
                    f"MixedPrecisionPolicy: {field} must be a floating-point torch.dtype or "
                    f"None, got {value!r} — e.g. torch.bfloat16"
                )


@dataclass
class OffloadPolicy:
    """No offloading: the shards live on the mesh's device (``fully_shard``'s default)."""


@dataclass
class CPUOffloadPolicy(OffloadPolicy):
    """Shards, their gradients and so the optimizer state live in host memory; each gather
    copies the shards to the mesh's device first. ``pin_memory``: page-locked host copies
    (needs an accelerator, as torch's)."""

    pin_memory: bool = True


# torch 2.15 changed ``reduce_dtype=None``: up to 2.14 FSDP2 reduces in the gradients' dtype
# (bf16 sums), from 2.15 promoted with the parameters' (``_get_reduce_dtype``). Losses differ.
_TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
UNSET_REDUCES_IN_PARAM_DTYPE = _TORCH < (2, 15)


def reduce_dtype_for(
    policy: MixedPrecisionPolicy, grad_dtype: torch.dtype, orig_dtype: torch.dtype
) -> torch.dtype:
    """The dtype FSDP2 reduces ``grad_dtype`` gradients in (``orig_dtype``: the shards')."""
    if policy.reduce_dtype is not None:
        return policy.reduce_dtype
    if UNSET_REDUCES_IN_PARAM_DTYPE:
        return grad_dtype
    return torch.promote_types(grad_dtype, orig_dtype)


def accumulation_dtype(
    policy: MixedPrecisionPolicy, grad_dtype: torch.dtype, orig_dtype: torch.dtype
) -> torch.dtype:
    """The dtype gradients accumulate in without sync: up to torch 2.14 an explicit
    ``reduce_dtype``, else their own; from 2.15 the reduce dtype when wider (bf16: fp32)."""
    if UNSET_REDUCES_IN_PARAM_DTYPE:
        return policy.reduce_dtype or grad_dtype
    wider = reduce_dtype_for(policy, grad_dtype, orig_dtype)
    return wider if wider.itemsize > grad_dtype.itemsize else grad_dtype


# From 2.15 FSDP2 also sets ``grad_dtype`` to that wider dtype when a backward without sync
# starts a gradient, so autograd sums a tied weight's two uses in fp32 (2.14: in bf16).
NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE = not UNSET_REDUCES_IN_PARAM_DTYPE


def map_tensors(fn, value):
    """``value`` (a module's inputs or outputs) with ``fn`` applied to every tensor in it:
    tuples, lists, namedtuples, dicts and dataclasses are rebuilt, anything else kept."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        mapped = [map_tensors(fn, v) for v in value]
        return type(value)(*mapped) if hasattr(value, "_fields") else type(value)(mapped)
    if isinstance(value, dict):
        return {k: map_tensors(fn, v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {
            f.name: map_tensors(fn, getattr(value, f.name)) for f in dataclasses.fields(value)
        }
        return dataclasses.replace(value, **changed)
    return value


def cast_floating(value, dtype: torch.dtype):
    """``value`` with every floating-point tensor cast to ``dtype`` (FSDP2's casts)."""
    return map_tensors(lambda t: t.to(dtype) if t.is_floating_point() else t, value)
