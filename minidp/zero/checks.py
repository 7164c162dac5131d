"""Errors instead of hangs or silently wrong sharding, for every ZeRO stage.

They run before any sharded communication (a bad call raises at once on every rank); the
cross-rank one raises on *every* rank, since ranks that partition different parameter
lists would hang or mix tensors up. ZeRO-1's arguments are checked as torch's are.

Test: ``pytest tests/test_zero.py -k error tests/test_zero1_interface.py``
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed as dist

from minidp.comm import all_gather

_DIMS = 6  # shape dims compared across ranks; more are folded into numel
_TORCH = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
# torch's refusal of overlap_with_ddp on gloo, in the installed release's words: from 2.9
# hook_with_zero_step names gloo; up to 2.8 it asked for NCCL or HCCL
GLOO_REFUSAL = (
    "Gloo backend using Overlapping DDP with ZeRO may meet hangs"
    if _TORCH >= (2, 9)
    else "Overlapping DDP with ZeRO using this approach currently requires NCCL/HCCL backend "
    "to avoid hangs"
)
# steps that cannot be split by parameter (L-BFGS's ranks would run unequal passes, and hang)
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


def param_list(who: str, params: Any) -> list:
    """``params`` as a list of tensors or of group dicts; torch's TypeErrors otherwise."""
    if isinstance(params, torch.Tensor):
        # a tensor is iterable: list() would make each row a "parameter" no model uses
        raise TypeError(
            f"{who}: expected params to be an iterable of tensors or of parameter-group "
            f"dicts, got a single {torch.typename(params)} of shape {tuple(params.shape)}. "
            f"Hint: wrap it in a list, {who}([tensor], ...), or pass model.parameters()"
        )
    try:
        out = list(params)
    except TypeError as exc:
        raise TypeError(
            f"{who}: expected params to be an iterable of tensors or of parameter-group "
            f"dicts, got {type(params).__name__}, which is not iterable. Hint: pass "
            "model.parameters()"
        ) from exc
    if not out:
        raise ValueError(f"{who}: expected at least one parameter, got an empty list")
    dicts = sum(isinstance(p, dict) for p in out)
    if 0 < dicts < len(out):
        raise TypeError(
            f"{who}: expected params to be all tensors or all parameter-group dicts, got "
            f"{dicts} dicts and {len(out) - dicts} other items. Hint: put loose tensors in a "
            'group of their own: [{"params": [...]}, ...]'
        )
    return out


def check_no_overlap(who: str, overlap_with_ddp: bool, process_group) -> None:
    """``overlap_with_ddp=True`` is refused. On gloo torch refuses it too (its
    ``hook_with_zero_step``, where the step runs inside DDP's comm hook, may hang there):
    in torch's words. Elsewhere minidp has no step inside DDP's comm hook."""
    if not overlap_with_ddp:
        return
    hint = (
        "Hint: leave overlap_with_ddp=False and call opt.step() after backward, or use "
        "minidp.zero.Zero2Optimizer, whose reduce-scatter overlaps backward"
    )
    try:
        backend = str(dist.get_backend(process_group))
    except (RuntimeError, ValueError):  # no torch group: a thread world's, on gloo
        backend = "gloo"
    if backend == "gloo":
        raise RuntimeError(
            f"{GLOO_REFUSAL} ({who}: overlap_with_ddp=True; torch's hook_with_zero_step "
            f"refuses it on gloo). {hint}"
        )
    raise NotImplementedError(
        f"{who}: expected overlap_with_ddp=False, got True on {backend}: minidp's ZeRO-1 steps "
        "after backward and does not run the optimizer inside DDP's communication hook "
        f"(torch's ddp_zero_hook.py, with a functional optimizer). {hint}"
    )


def _row(group_index: int, p: torch.Tensor) -> list[int]:
    dims = list(p.shape[:_DIMS]) + [-1] * (_DIMS - min(p.dim(), _DIMS))
    return [group_index, p.dim(), p.numel(), int(p.requires_grad), *dims]


def verify_same_parameters(who: str, group, param_groups: list[dict]) -> None:
    """Raise on every rank unless all ranks pass the same parameter groups (count and shapes)."""
    world, rank = group.size(), group.rank()
    if world == 1:
        return
    rows = [_row(g, p) for g, pg in enumerate(param_groups) for p in pg["params"]]
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
