"""Small helpers shared by the collective tests (not a test module).

The gloo references work on every supported torch: where an older gloo lacks an operation
(``ReduceOp.AVG`` and ``reduce_scatter`` before torch 2.8) they build the same result from
operations it has, and tests/test_collectives.py checks on a newer torch that the stand-in
is bit-identical to gloo's own operation.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minidp.comm import group as groups
from minidp.comm import ops

GLOO_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.AVG,  # the enum exists everywhere; gloo accepts it from torch 2.8
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


# gloo's words when an older torch lacks the operation (raised locally, before any message)
def _fsdp2_unusable() -> str | None:
    """Why torch's FSDP2 cannot be the reference on a gloo (CPU) mesh here, or None."""
    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    if version < (2, 8):
        return (
            f"torch {torch.__version__}: ProcessGroupGloo does not support reduce_scatter "
            "before 2.8, so FSDP2 cannot run on a CPU mesh"
        )
    if version == (2, 8):
        return (
            f"torch {torch.__version__}: FSDP2 on a gloo mesh sums the gradients instead of "
            "averaging them (measured: 2.0x the average at 2 ranks; 2.11 averages), so it is "
            "no reference on this version"
        )
    return None


FSDP2_UNUSABLE = _fsdp2_unusable()  # the skip reason of every comparison with FSDP2

NO_GLOO_AVG = "Cannot use ReduceOp.AVG with Gloo"
NO_GLOO_REDUCE_SCATTER = "does not support reduce_scatter"


def gloo_native_all_reduce(t: torch.Tensor, op: str) -> torch.Tensor:
    """gloo's own all_reduce, no stand-in: raises where the installed gloo lacks ``op``."""
    opts = dist.AllreduceOptions()
    opts.reduceOp = GLOO_OPS[op]
    groups.resolve().allreduce([t], opts).wait()
    return t


def gloo_avg_as_sum_then_divide(t: torch.Tensor) -> torch.Tensor:
    """AVG the way gloo does it where it has AVG: its SUM all-reduce, then ``t /= world``.

    One rounding for the sum (gloo's ring, bit for bit) and one for the division: identical
    bits to ``ReduceOp.AVG`` (checked by ``test_gloo_reference_fallbacks_are_exact``).
    """
    gloo_native_all_reduce(t, "sum")
    return t.div_(groups.resolve().size())


def gloo_all_reduce(t: torch.Tensor, op: str) -> torch.Tensor:
    """Reference: gloo's own all_reduce on this thread's/process's group."""
    try:
        gloo_native_all_reduce(t, op)
    except RuntimeError as e:  # torch < 2.8: gloo has no AVG
        if op != "avg" or NO_GLOO_AVG not in str(e):
            raise
        gloo_avg_as_sum_then_divide(t)
    return t


def gloo_reduce_scatter_by_all_reduce(output: torch.Tensor, inputs: list[torch.Tensor]):
    """Reduce-scatter from gloo's SUM all-reduce: reduce every rank's whole list, keep ours.

    Integers and integer-valued floats come out exactly as gloo's reduce_scatter would (every
    order sums them exactly); other floats may differ in the last bits, because gloo's
    reduce_scatter and its ring all-reduce add in different orders.
    """
    flat = torch.cat([t.reshape(-1) for t in inputs])  # (world * numel,) rank-local
    gloo_native_all_reduce(flat, "sum")
    n, rank = output.numel(), groups.resolve().rank()
    return output.copy_(flat[rank * n : (rank + 1) * n].view(output.shape))


def gloo_reduce_scatter(output: torch.Tensor, inputs: list[torch.Tensor]) -> torch.Tensor:
    """Reference: gloo's reduce_scatter (SUM), or its stand-in where torch < 2.8 lacks it."""
    try:
        groups.resolve().reduce_scatter([output], [inputs]).wait()
    except RuntimeError as e:
        if NO_GLOO_REDUCE_SCATTER not in str(e):
            raise
        gloo_reduce_scatter_by_all_reduce(output, inputs)
    return output


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
