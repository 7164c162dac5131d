"""torch's collectives on a given group, what the exercises compare with: a thread rank's
``ProcessGroupGloo`` is not registered with ``torch.distributed``, so its methods are called
(what the functional API calls underneath)."""

import torch
import torch.distributed as dist

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def all_reduce(tensor: torch.Tensor, group, op: str = "sum") -> torch.Tensor:
    """``torch.distributed.all_reduce`` (gloo), in place; returns the tensor."""
    opts = dist.AllreduceOptions()
    opts.reduceOp = _OPS[op]
    group.allreduce([tensor], opts).wait()
    return tensor


def all_gather(tensor: torch.Tensor, group) -> list[torch.Tensor]:
    """``torch.distributed.all_gather``: every rank's tensor, in rank order."""
    out = [torch.empty_like(tensor) for _ in range(group.size())]
    group.allgather([out], [tensor]).wait()
    return out


def broadcast(tensor: torch.Tensor, src: int, group) -> torch.Tensor:
    """``torch.distributed.broadcast`` from ``src``, in place."""
    opts = dist.BroadcastOptions()
    opts.rootRank = src
    group.broadcast([tensor], opts).wait()
    return tensor


def reduce_scatter(inputs: list[torch.Tensor], group) -> torch.Tensor:
    """``torch.distributed.reduce_scatter`` (sum): ``inputs[rank]`` summed over ranks. gloo
    has one from torch ~2.8; before, one gloo all-reduce per input (the same sums)."""
    out = torch.empty_like(inputs[0])
    try:
        group.reduce_scatter([out], [list(inputs)], dist.ReduceScatterOptions()).wait()
    except RuntimeError as exc:
        if "does not support" not in str(exc):
            raise
        sums = [all_reduce(t.clone(), group) for t in inputs]  # same order on every rank
        out = sums[group.rank()]
    return out
