"""Small helpers shared by the collective tests (not a test module)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from minidp.comm import group as groups
from minidp.comm import ops

GLOO_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "product": dist.ReduceOp.PRODUCT,
}
# dtypes gloo's own all_reduce accepts in torch 2.13: all of minidp's but int16
GLOO_DTYPES = set(ops.DTYPES) - {torch.int16}


def rank_input(rank: int, numel: int, dtype: torch.dtype, seed: int, shape=None) -> torch.Tensor:
    """Deterministic per-rank data (explicit generator: thread ranks share the global RNG)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        x = torch.randn(numel, generator=g).to(dtype)
    elif dtype == torch.uint8:
        x = torch.randint(0, 4, (numel,), generator=g).to(dtype)
    else:  # small values: products and sums stay inside int8
        x = torch.randint(-2, 3, (numel,), generator=g).to(dtype)
    return x.view(shape) if shape is not None else x


def gloo_all_reduce(t: torch.Tensor, op: str) -> torch.Tensor:
    """Reference: gloo's own all_reduce on this thread's/process's group."""
    opts = dist.AllreduceOptions()
    opts.reduceOp = GLOO_OPS[op]
    groups.resolve().allreduce([t], opts).wait()
    return t


def direct_reduce(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    """Reference computed straight from every rank's input, in rank order."""
    acc = inputs[0].clone()
    for x in inputs[1:]:
        if op in ("sum", "avg"):
            acc = acc + x
        elif op == "product":
            acc = acc * x
        elif op == "max":
            acc = torch.maximum(acc, x)
        else:
            acc = torch.minimum(acc, x)
    if op == "avg":
        acc = acc / len(inputs)
    return acc.to(inputs[0].dtype)
