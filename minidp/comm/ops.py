"""Reduce ops, the dtypes they accept and the flat-view helper, shared by every collective.

Test: ``pytest tests/test_collectives.py``

:func:`combine` writes ``local OP acc`` into ``local``, as gloo does. Under max and min a
NaN follows gloo's ``std::max(local, acc)``: one arriving in ``acc`` is dropped, one in
``local`` stays (``torch.maximum`` would always spread it) — bit for bit as gloo.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

OPS = ("sum", "avg", "max", "min", "product")
DTYPES = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
)
_FROM_REDUCE_OP = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.PRODUCT: "product",
}
_ALIASES = {"prod": "product", "mean": "avg"}


def normalize_op(op, who: str) -> str:
    """Return the op's name, or raise a ValueError that lists the accepted ops."""
    if isinstance(op, str):
        name = _ALIASES.get(op.lower(), op.lower())
        if name in OPS:
            return name
    else:
        for reduce_op, name in _FROM_REDUCE_OP.items():
            try:
                if op == reduce_op:
                    return name
            except TypeError:
                pass
    raise ValueError(
        f"{who}: unsupported op {op!r} — expected one of {', '.join(OPS)} "
        "(a string or torch.distributed.ReduceOp)"
    )


def check_dtype(tensor: torch.Tensor, op: str, who: str) -> None:
    """Raise a TypeError for a dtype/op pair the collectives do not support."""
    if tensor.dtype not in DTYPES:
        names = ", ".join(str(d).replace("torch.", "") for d in DTYPES)
        raise TypeError(
            f"{who}: dtype {tensor.dtype} is not supported — expected one of {names}. "
            "Hint: cast with tensor.to(torch.float32) (bool: .to(torch.uint8))"
        )
    if op == "avg" and not tensor.dtype.is_floating_point:
        raise TypeError(
            f"{who}: op 'avg' needs a floating-point tensor but got {tensor.dtype} — "
            "an integer average would have to round. Hint: use op='sum' and divide, "
            "or cast to float first"
        )


def combine(op: str, local: torch.Tensor, acc: torch.Tensor) -> None:
    """``local = local OP acc``, in place (avg sums here; the caller divides at the end)."""
    if op in ("sum", "avg"):
        local.add_(acc)
    elif op == "product":
        local.mul_(acc)
    elif not local.dtype.is_floating_point:
        (torch.maximum if op == "max" else torch.minimum)(local, acc, out=local)
    elif op == "max":  # gloo's std::max(local, acc): a NaN in acc loses, a NaN in local wins
        torch.where(local < acc, acc, local, out=local)
    else:  # std::min(local, acc), same NaN rule (torch.minimum would spread every NaN)
        torch.where(acc < local, acc, local, out=local)


def finish(op: str, tensor: torch.Tensor, world_size: int) -> None:
    """Apply the last step of ``op`` after the reduction (avg: divide by the world size)."""
    if op == "avg":
        tensor.div_(world_size)


def flat_inplace(tensor: torch.Tensor, body) -> torch.Tensor:
    """Run ``body(flat)`` on a contiguous 1-D view (or copy) of ``tensor``; copy back."""
    if tensor.is_contiguous():
        body(tensor.view(-1))
    else:  # non-contiguous: work on a copy, the caller's tensor still ends up with the result
        flat = tensor.contiguous().view(-1)
        body(flat)
        tensor.copy_(flat.view(tensor.shape))
    return tensor
