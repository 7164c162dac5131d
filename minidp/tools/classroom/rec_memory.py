"""Record memory per rank over one step, for real: DDP, ZeRO-1, ZeRO-2 and FSDP.

    python -m minidp classroom --no-serve --only memory --out /tmp/cls

On ``world`` thread-ranks (bytes, not time, are what this scene shows: threads are
enough), the same MLP is trained under DDP, ZeRO-1, ZeRO-2 and FSDP
(``minidp.tools.planner.stages.build``). The first step runs unrecorded: it allocates the
optimizer state, which every later step holds from its start (the ZeRO paper's steady
state). Of the second step, what each rank holds is measured from the real tensors
(``minidp.tools.planner.memory.measure``: parameters, gradients, optimizer state, DDP's
buckets, a DTensor shard's local bytes) after ``zero_grad`` (the step's start), after
forward, after backward and after the optimizer step — one ``memory`` event per rank per
point — and, under DDP, ZeRO-1 and ZeRO-2, each time a gradient lands in backward
(``memory grad``: a post-accumulate-grad hook per parameter). ZeRO-1's events also name
the parameters whose optimizer state the rank owns (whole tensors: why its ranks can
differ). Under FSDP, what ``measure`` cannot see — each unit's all-gather buffer and
gathered full parameters, its full gradients and the reduce-scatter's input, which come
and go inside forward and backward — is noted at every change (``memory gather start``,
``memory gathered``, ``memory freed``, ``memory grads``, ``memory reduce start``,
``memory reduced``; ``rec_fsdp.observe``).

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp import trace
from minidp.tools.classroom.rec_fsdp import mlp, observe

LANE = "classroom"
STAGES = ("ddp", "zero1", "zero2", "fsdp")
POINTS = ("step start", "after forward", "after backward", "after step")


def _owned(wrapped, opt) -> list:
    """ZeRO-1: [name, numel] of each parameter whose optimizer state this rank keeps."""
    local = getattr(opt, "optim", None)
    if local is None or not hasattr(opt, "_partitions"):
        return []
    names = {id(p): n.removeprefix("module.") for n, p in wrapped.named_parameters()}
    # ZeRO-1 gives each rank whole (plain) parameters: numel is what it owns
    return [[names[id(p)], p.numel()] for g in local.param_groups for p in g["params"]]  # global


def _memory_rank(rank: int, world: int, width: int) -> list[dict]:
    from minidp.fsdp.wrap import unit_of
    from minidp.tools.planner.memory import measure
    from minidp.tools.planner.stages import build, train_step

    model = mlp(width)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(16, width, generator=g), torch.randn(16, 4, generator=g)
    events = []

    def note(stage: str, point: str, wrapped, opt, name: str = "memory", **more) -> None:
        u = measure(wrapped, opt)  # local bytes: a DTensor shard counts its own rows
        args = {"stage": stage, "point": point, "params": u.params, "grads": u.grads,
                "optimizer": u.optimizer, "buckets": u.buckets, **more}  # fmt: skip
        if stage == "zero1" and name == "memory":
            args["owned"] = _owned(wrapped, opt)
        events.append({"name": name, "ph": "i", "s": "t", "ts": trace.now_us(),
                       "pid": rank, "tid": LANE, "args": args})  # fmt: skip

    def step(stage: str, wrapped, opt) -> None:
        opt.zero_grad(set_to_none=True)
        note(stage, POINTS[0], wrapped, opt)
        loss = nn.functional.mse_loss(wrapped(x), y)
        note(stage, POINTS[1], wrapped, opt)
        loss.backward()
        note(stage, POINTS[2], wrapped, opt)
        opt.step()
        note(stage, POINTS[3], wrapped, opt)

    def landed(stage: str, name: str, wrapped, opt):  # a gradient of `name` is in .grad
        return lambda _: note(stage, "backward", wrapped, opt, name="memory grad", param=name)

    with trace.recording() as rec:  # FSDP's gathers and frees, noted by the observers
        for stage in STAGES:
            wrapped, opt = build(stage, model, torch.optim.AdamW, lr=1e-3)
            train_step(wrapped, opt, x, y, nn.functional.mse_loss)  # allocates optimizer state
            hooks = []
            if stage == "fsdp":  # its gradients arrive in each unit's reduce: observed there
                for m in wrapped.modules():
                    if (u := unit_of(m)) is not None and u.shapes:
                        observe(u, rank, prefix="memory", stage=stage)
            else:
                hooks = [p.register_post_accumulate_grad_hook(
                    landed(stage, n.removeprefix("module."), wrapped, opt))
                    for n, p in wrapped.named_parameters()]  # fmt: skip
            step(stage, wrapped, opt)
            for h in hooks:
                h.remove()
    return events + [e for e in rec.events if e["pid"] == rank and e["name"].startswith("memory ")]


def memory_events(world: int, width: int = 64) -> list[dict]:
    """Measured model-state bytes per rank at 4 points of a step per stage, at each gradient
    in backward, and FSDP's transient buffers, full parameters and gradients in between."""
    from minidp.launch import run_threads

    if world < 2:
        raise ValueError(f"classroom memory: --ddp-world-size must be at least 2, got {world}")
    return [e for r in run_threads(_memory_rank, world, width, timeout=60.0) for e in r]
