"""One training step under each stage — DDP, ZeRO-1, ZeRO-2, FSDP — and what it left in memory.

Run inside a rank (a process or a thread of a world)::

    usage = step_and_measure("zero2", model, x, y, loss_fn, torch.optim.AdamW, lr=1e-3)
    usage.params, usage.grads, usage.optimizer      # bytes this rank holds, measured

and :func:`step_traffic` does the same while counting the bytes this rank sent. The
lessons, the recorder's memory scene (``memory_stages.png``) and the sharded benches build
their stages here, so they show the same real tensors. FSDP: each child module with
parameters, then the root, like FSDP2's usual wrapping.

Test: ``pytest tests/test_memory.py``
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable

import torch

from minidp.comm import count_traffic
from minidp.fsdp.dtensor import PlainShardsWarning
from minidp.tools.planner.memory import Usage, measure

STAGE_ORDER = ("ddp", "zero1", "zero2", "fsdp")


def build(stage: str, model: torch.nn.Module, optimizer_class: type, **options):
    """``(wrapped model, optimizer)`` for ``stage``, from a private copy of ``model``."""
    # Thread worlds shard into plain tensors (no torch mesh): fine for counting bytes, all
    # this file does with them, so the warning meant for training loops is not shown for
    # this module's calls (FSDP's shards, ZeRO-2's freed gradients). Set at each call: a
    # filter set at import does not outlive a test runner's reset of the filters.
    warnings.filterwarnings("ignore", category=PlainShardsWarning, module=re.escape(__name__))
    model = copy.deepcopy(model)
    if stage in ("ddp", "zero1"):
        from minidp.ddp import DistributedDataParallel

        wrapped = DistributedDataParallel(model)
        if stage == "ddp":
            return wrapped, optimizer_class(wrapped.parameters(), **options)
        from minidp.zero.zero1 import ZeroRedundancyOptimizer

        return wrapped, ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class, **options)
    if stage == "zero2":
        from minidp.zero.zero2 import Zero2Optimizer

        return model, Zero2Optimizer(model.parameters(), optimizer_class, **options)
    if stage == "fsdp":
        from minidp.fsdp import fully_shard

        for child in model.children():
            if any(True for _ in child.parameters()):
                fully_shard(child, reshard_after_forward=True)
        fully_shard(model)
        return model, optimizer_class(model.parameters(), **options)
    raise ValueError(f"expected a stage in {list(STAGE_ORDER)}, got {stage!r}")


def train_step(model, optimizer, x, y, loss_fn: Callable, average: Callable | None = None) -> None:
    """zero_grad, forward, backward, ``average(model)`` if given, step."""
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    if average is not None:
        average(model)
    optimizer.step()


def step_and_measure(stage: str, model, x, y, loss_fn, optimizer_class, **options) -> Usage:
    """Build ``stage``, run one step, and measure this rank's model states after it."""
    wrapped, opt = build(stage, model, optimizer_class, **options)
    train_step(wrapped, opt, x, y, loss_fn)
    return measure(wrapped, opt)


def step_traffic(stage: str, model, x, y, loss_fn, optimizer_class, **options) -> int:
    """Bytes this rank sends in one step (after a first step that builds optimizer state).

    ``count_traffic`` counts what the step sends, its communication thread included. For
    DDP and ZeRO-1 the gradients are averaged here by ``allreduce_gradients`` (one flat
    all-reduce after backward: DDP's bytes, without the per-bucket headers) round the ring:
    the traffic the ZeRO paper counts (DDP's "auto" would send a small bucket whole,
    in one exchange).
    """
    average = None
    if stage in ("ddp", "zero1"):
        from minidp.ddp import allreduce_gradients
        from minidp.zero.zero1 import ZeroRedundancyOptimizer

        wrapped = copy.deepcopy(model)

        def average(m: torch.nn.Module) -> None:
            allreduce_gradients(m, algorithm="ring")

        if stage == "ddp":
            opt = optimizer_class(wrapped.parameters(), **options)
        else:
            opt = ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class, **options)
    else:
        wrapped, opt = build(stage, model, optimizer_class, **options)
    train_step(wrapped, opt, x, y, loss_fn, average)
    with count_traffic() as t:
        train_step(wrapped, opt, x, y, loss_fn, average)
    return t.sent_bytes
