"""``MixedPrecisionPolicy``: which dtype FSDP gathers, computes and reduces in (torch's fields).

The sharded parameters (what the optimizer steps) keep their dtype; ``param_dtype`` is the
all-gather's and the unsharded parameters', ``reduce_dtype`` the reduce-scatter's (results
cast back into ``.grad``); ``None``: the installed torch's rule.

Test: ``pytest tests/test_fsdp.py -k "bf16 or fp16"``
"""

from __future__ import annotations

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


def cast_floating(value, dtype: torch.dtype):
    """``value`` (a unit's inputs or outputs) with every floating-point tensor cast to dtype."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        cast = [cast_floating(v, dtype) for v in value]
        return type(value)(cast) if not hasattr(value, "_fields") else type(value)(*cast)
    if isinstance(value, dict):
        return {k: cast_floating(v, dtype) for k, v in value.items()}
    return value
