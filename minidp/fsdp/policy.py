"""``MixedPrecisionPolicy``: which dtype FSDP gathers, computes and reduces in.

The sharded parameters — what the optimizer steps — stay in their own dtype (fp32 "master
weights"). ``param_dtype`` is the dtype of the all-gather and of the unsharded parameters
the forward and backward use; ``reduce_dtype`` the dtype of the gradient reduce-scatter
(``None``: the gradients' own dtype, i.e. ``param_dtype``). Reduced gradients are cast back
to the sharded parameter's dtype before they are accumulated into ``.grad``.

The same fields and defaults as ``torch.distributed.fsdp.MixedPrecisionPolicy`` (minus
``output_dtype``). Test: ``pytest tests/test_fsdp.py -k bf16``
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """``param_dtype``: gather/compute dtype; ``reduce_dtype``: gradient reduction dtype."""

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    cast_forward_inputs: bool = True  # cast a unit's floating-point inputs to param_dtype

    def __post_init__(self) -> None:
        for field in ("param_dtype", "reduce_dtype"):
            value = getattr(self, field)
            if value is not None and not (
                isinstance(value, torch.dtype) and value.is_floating_point
            ):
                raise ValueError(
                    f"MixedPrecisionPolicy: {field} must be a floating-point torch.dtype or "
                    f"None, got {value!r} — e.g. torch.bfloat16"
                )


def cast_inputs(value, dtype: torch.dtype):
    """``value`` with every floating-point tensor in it (tuples, lists, dicts) cast to dtype."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        cast = [cast_inputs(v, dtype) for v in value]
        return type(value)(cast) if not hasattr(value, "_fields") else type(value)(*cast)
    if isinstance(value, dict):
        return {k: cast_inputs(v, dtype) for k, v in value.items()}
    return value
