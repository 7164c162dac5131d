"""Errors instead of hangs or silently wrong sharding, for every ZeRO stage.

A sharded optimizer goes wrong quietly: if two ranks partition different parameter lists,
each broadcasts or gathers shards the other does not expect, and the step either hangs
or mixes up tensors. So the checks here run before any sharded communication, and the
cross-rank one raises on *every* rank at once (the same table is gathered everywhere).

Test: ``pytest tests/test_zero.py -k error``
"""

from __future__ import annotations

import inspect

import torch

from minidp.comm import all_gather

_DIMS = 6  # shape dims compared across ranks; more are folded into numel
# Optimizers whose step cannot be split by parameter: L-BFGS re-evaluates the whole
# model inside step (ranks would run different numbers of forward/backward passes and
# hang), SparseAdam needs sparse gradients (ZeRO shards dense ones).
UNSUPPORTED = {
    "LBFGS": "its step() calls the closure a data-dependent number of times",
    "SparseAdam": "it needs sparse gradients, which ZeRO does not shard",
}


def check_optimizer_class(who: str, optimizer_class) -> None:
    """``optimizer_class`` must be a ``torch.optim.Optimizer`` subclass that can be sharded."""
    if not (
        inspect.isclass(optimizer_class) and issubclass(optimizer_class, torch.optim.Optimizer)
    ):
        got = repr(optimizer_class)
        if isinstance(optimizer_class, torch.optim.Optimizer):
            got = f"an instance of {type(optimizer_class).__name__}"
        raise TypeError(
            f"{who}: expected optimizer_class to be a torch.optim.Optimizer subclass such as "
            f"torch.optim.AdamW, got {got}. Hint: pass the class and its options "
            f"separately: {who}(params, torch.optim.AdamW, lr=1e-3)"
        )
    why = UNSUPPORTED.get(optimizer_class.__name__)
    if why is not None:
        raise ValueError(
            f"{who}: expected an optimizer whose step updates each parameter on its own "
            f"(SGD, Adam, AdamW, ...), got {optimizer_class.__name__}: {why}. Hint: use it "
            "unsharded with DistributedDataParallel instead"
        )


def check_dense(who: str, params: list[torch.Tensor]) -> None:
    """Parameters must be dense tensors of one dtype (what the flat buffers hold)."""
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{who}: expected tensors as parameters, got {type(p).__name__} at {i}")
        if p.layout != torch.strided:
            raise ValueError(
                f"{who}: expected dense parameters, got a {p.layout} tensor at index {i}. "
                "Hint: keep sparse parameters out of the sharded optimizer"
            )
        if p.dtype != params[0].dtype:
            raise ValueError(
                f"{who}: expected every parameter to have one dtype, got {params[0].dtype} "
                f"(index 0) and {p.dtype} (index {i}). Hint: cast the model with .to(dtype) first"
            )


def check_dense_grads(who: str, params: list[torch.Tensor]) -> None:
    """Gradients must be dense: a sparse one (``nn.Embedding(sparse=True)``) cannot be sharded."""
    for i, p in enumerate(params):
        if p.grad is not None and p.grad.layout != torch.strided:
            raise ValueError(
                f"{who}: expected dense gradients, got a {p.grad.layout} gradient for parameter "
                f"{i} of shape {tuple(p.shape)}. Hint: build nn.Embedding with sparse=False"
            )


def _row(group_index: int, p: torch.Tensor) -> list[int]:
    dims = list(p.shape[:_DIMS]) + [-1] * (_DIMS - min(p.dim(), _DIMS))
    return [group_index, p.dim(), p.numel(), int(p.requires_grad), *dims]


def verify_same_parameters(who: str, group, param_groups: list[list[torch.Tensor]]) -> None:
    """Raise on every rank unless all ranks pass the same parameter groups (count and shapes)."""
    world, rank = group.size(), group.rank()
    if world == 1:
        return
    rows = [_row(g, p) for g, params in enumerate(param_groups) for p in params]
    head = torch.tensor([len(rows), len(param_groups)], dtype=torch.int64)
    heads = [torch.empty_like(head) for _ in range(world)]
    all_gather(heads, head, group)
    for r in range(world):
        if not torch.equal(heads[r], heads[0]):
            raise RuntimeError(
                f"{who}: expected the same parameters on every rank, but rank {r} passes "
                f"{int(heads[r][0])} parameters in {int(heads[r][1])} groups while rank 0 passes "
                f"{int(heads[0][0])} in {int(heads[0][1])} (this is rank {rank}). Hint: build "
                "the model and the parameter groups identically on every rank"
            )
    table = torch.tensor(rows, dtype=torch.int64)
    tables = [torch.empty_like(table) for _ in range(world)]
    all_gather(tables, table, group)
    for r in range(1, world):
        for i in range(len(rows)):
            ref, got = tables[0][i].tolist(), tables[r][i].tolist()
            if ref != got:
                raise RuntimeError(
                    f"{who}: expected the same parameters on every rank, but parameter {i} is "
                    f"{_describe(got)} on rank {r} and {_describe(ref)} on rank 0. Hint: a "
                    "rank-dependent layer size or requires_grad flag is the usual cause"
                )


def _describe(row: list[int]) -> str:
    dims = [d for d in row[4:] if d >= 0][: row[1]]
    grad = "trainable" if row[3] else "frozen"
    return f"shape {tuple(dims)} ({grad}, group {row[0]})"
