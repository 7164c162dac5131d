"""Record memory per rank over one step, for real: DDP, ZeRO-1, ZeRO-2 and FSDP.

    python -m minidp classroom --no-serve --only memory --out /tmp/cls

On ``world`` thread-ranks (bytes, not time, are what this scene shows: threads are
enough), the same MLP is trained one AdamW step under DDP, ZeRO-1, ZeRO-2 and FSDP
(``minidp.tools.planner.stages.build``), and what each rank holds is measured from the real tensors
(``minidp.tools.planner.memory.measure``: parameters, gradients, optimizer state, DDP's buckets)
after building, after forward, after backward and after the optimizer step — one
``memory`` event per rank per point. ZeRO-1's events also name the parameters whose
optimizer state the rank owns (whole tensors: why its ranks can differ). Under FSDP, what
``measure`` cannot see — each unit's all-gather buffer and gathered full parameters,
which come and go inside forward and backward — is noted at every gather and free
(``memory gather start``, ``memory gathered``, ``memory freed``; ``rec_fsdp.observe``).

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp import trace
from minidp.tools.classroom.rec_fsdp import mlp, observe

LANE = "classroom"
STAGES = ("ddp", "zero1", "zero2", "fsdp")
POINTS = ("built", "after forward", "after backward", "after step")


def _owned(wrapped, opt) -> list:
    """ZeRO-1: [name, numel] of each parameter whose optimizer state this rank keeps."""
    local = getattr(opt, "optim", None)
    if local is None or not hasattr(opt, "_partitions"):
        return []
    names = {id(p): n.removeprefix("module.") for n, p in wrapped.named_parameters()}
    return [[names[id(p)], p.numel()] for g in local.param_groups for p in g["params"]]


def _memory_rank(rank: int, world: int, width: int) -> list[dict]:
    from minidp.fsdp.wrap import unit_of
    from minidp.tools.planner.memory import measure
    from minidp.tools.planner.stages import build

    model = mlp(width)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(16, width, generator=g), torch.randn(16, 4, generator=g)
    events = []

    def note(stage: str, point: str, wrapped, opt) -> None:
        u = measure(wrapped, opt)
        args = {"stage": stage, "point": point, "params": u.params, "grads": u.grads,
                "optimizer": u.optimizer, "buckets": u.buckets}  # fmt: skip
        if stage == "zero1":
            args["owned"] = _owned(wrapped, opt)
        events.append({"name": "memory", "ph": "i", "s": "t", "ts": trace.now_us(),
                       "pid": rank, "tid": LANE, "args": args})  # fmt: skip

    with trace.recording() as rec:  # FSDP's gathers and frees, noted by the observers
        for stage in STAGES:
            wrapped, opt = build(stage, model, torch.optim.AdamW, lr=1e-3)
            if stage == "fsdp":
                for m in wrapped.modules():
                    if (u := unit_of(m)) is not None and u.shapes:
                        observe(u, rank, prefix="memory", stage=stage)
            note(stage, POINTS[0], wrapped, opt)
            opt.zero_grad()
            loss = nn.functional.mse_loss(wrapped(x), y)
            note(stage, POINTS[1], wrapped, opt)
            loss.backward()
            note(stage, POINTS[2], wrapped, opt)
            opt.step()
            note(stage, POINTS[3], wrapped, opt)
    return events + [e for e in rec.events if e["pid"] == rank and e["name"].startswith("memory ")]


def memory_events(world: int, width: int = 64) -> list[dict]:
    """Measured model-state bytes per rank, 4 points of one step per stage, and FSDP's
    transient all-gather buffers and full parameters in between."""
    from minidp.launch import run_threads

    if world < 2:
        raise ValueError(f"classroom memory: --ddp-world-size must be at least 2, got {world}")
    return [e for r in run_threads(_memory_rank, world, width, timeout=60.0) for e in r]
