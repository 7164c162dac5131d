"""``MixedPrecisionPolicy``: which dtype FSDP gathers, computes and reduces in.

The sharded parameters — what the optimizer steps — stay in their own dtype (fp32 "master
weights"). ``param_dtype`` is the dtype of the all-gather and of the unsharded parameters
the forward and backward use; ``reduce_dtype`` the dtype of the gradient reduce-scatter.
Reduced gradients are cast back to the sharded parameter's dtype before they are
accumulated into ``.grad``.

``reduce_dtype=None`` means what the installed torch's FSDP2 means by it (see
:func:`reduce_dtype_for`): up to torch 2.14 the gradients' own dtype (``param_dtype``), from
2.15 the sharded parameters' dtype (fp32 master weights: the sum is not rounded to bf16).

The same fields and defaults as ``torch.distributed.fsdp.MixedPrecisionPolicy``;
``output_dtype`` casts a unit's floating-point outputs (bf16 blocks under an fp32 root give
the root fp32 activations). Test: ``pytest tests/test_fsdp.py -k "bf16 or fp16"``
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


# torch 2.15 changed what FSDP2 does with ``reduce_dtype=None``. Up to 2.14 it reduce-scatters
# the gradients in the dtype autograd made them in (``param_dtype``: bf16 sums). From 2.15 the
# unset reduce dtype falls back to the parameters' original dtype (``FSDPParam.
# unsharded_grad_dtype``; ``FSDPParamGroup._get_reduce_dtype`` promotes over it), so bf16
# gradients are upcast to fp32 before the reduce-scatter. Measured: the bf16 losses differ from
# step 2 on between the two rules, so minidp follows the installed torch's.
_TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
UNSET_REDUCES_IN_PARAM_DTYPE = _TORCH < (2, 15)


def reduce_dtype_for(
    policy: MixedPrecisionPolicy, grad_dtype: torch.dtype, orig_dtype: torch.dtype
) -> torch.dtype:
    """The dtype FSDP2 reduce-scatters in, for gradients of ``grad_dtype`` on parameters
    whose sharded (master) dtype is ``orig_dtype``."""
    if policy.reduce_dtype is not None:
        return policy.reduce_dtype
    if UNSET_REDUCES_IN_PARAM_DTYPE:
        return grad_dtype
    return torch.promote_types(grad_dtype, orig_dtype)


def accumulation_dtype(
    policy: MixedPrecisionPolicy, grad_dtype: torch.dtype, orig_dtype: torch.dtype
) -> torch.dtype:
    """The dtype unreduced gradients accumulate in between backwards without a reduce-scatter
    (``set_requires_gradient_sync(False)``). Up to torch 2.14 FSDP2 accumulates in an explicit
    ``reduce_dtype`` (``FSDPParam.to_accumulated_grad_if_needed``), else in the gradients' own
    dtype; from 2.15 in the reduce dtype when that is wider, an unset one included
    (``FSDPParamGroup._set_unsharded_grad_dtypes``): bf16 micro-batches then add in fp32."""
    if UNSET_REDUCES_IN_PARAM_DTYPE:
        return policy.reduce_dtype or grad_dtype
    wider = reduce_dtype_for(policy, grad_dtype, orig_dtype)
    return wider if wider.itemsize > grad_dtype.itemsize else grad_dtype


# From 2.15 FSDP2 also sets the unsharded parameter's ``grad_dtype`` to that wider dtype for a
# backward without sync that starts a gradient: autograd then casts each contribution before
# summing them (a tied weight's two uses add in fp32, not bf16). Up to 2.14 they add in bf16.
NO_SYNC_SUMS_IN_ACCUMULATION_DTYPE = not UNSET_REDUCES_IN_PARAM_DTYPE


def cast_floating(value, dtype: torch.dtype):
    """``value`` with every floating-point tensor in it (tuples, lists, dicts) cast to dtype:
    a unit's inputs (to ``param_dtype``) and its outputs (to ``output_dtype``)."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        cast = [cast_floating(v, dtype) for v in value]
        return type(value)(cast) if not hasattr(value, "_fields") else type(value)(*cast)
    if isinstance(value, dict):
        return {k: cast_floating(v, dtype) for k, v in value.items()}
    return value
