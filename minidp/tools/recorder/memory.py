"""Record memory per rank through a step, for real: DDP, ZeRO-1, ZeRO-2 and FSDP.

    python -m minidp diagrams --only memory
    python -m minidp classroom --no-serve --only memory --out /tmp/cls

Thread-ranks (bytes, not time) train the same MLP under each stage (``planner.stages``);
the first step allocates the optimizer state (the steady state from then on). Of the
second, what each rank holds is measured from the real tensors (``planner.memory.measure``)
at 4 points (``memory``) and, under DDP and ZeRO, as each gradient lands (``memory grad``);
ZeRO-1's name the parameters whose state the rank owns (whole tensors: why ranks differ).
Under FSDP, what ``measure`` cannot see — buffers, gathered units, full gradients — is
noted at every change (``memory gathered`` ...: ``fsdp.observe``).

Test: ``pytest tests/test_classroom.py tests/test_diagrams.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp import trace
from minidp.tools.recorder import instant, mlp
from minidp.tools.recorder.fsdp import observe

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


def _memory_rank(rank: int, world: int, sizes: tuple) -> list[dict]:
    from minidp.fsdp.wrap import unit_of
    from minidp.tools.planner.memory import measure
    from minidp.tools.planner.stages import build, train_step

    model = mlp(*sizes)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(16, sizes[0], generator=g), torch.randn(16, sizes[-1], generator=g)
    events = []

    def note(stage: str, point: str, wrapped, opt, name: str = "memory", **more) -> None:
        u = measure(wrapped, opt)  # local bytes: a DTensor shard counts its own rows
        args = {"stage": stage, "point": point, "params": u.params, "grads": u.grads,
                "optimizer": u.optimizer, "buckets": u.buckets, **more}  # fmt: skip
        if stage == "zero1" and name == "memory":
            args["owned"] = _owned(wrapped, opt)
        events.append(instant(name, trace.now_us(), rank, **args))

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


def memory_events(world, sizes: tuple) -> list[dict]:
    """Measured model-state bytes per rank of ``mlp(*sizes)`` at 4 points of a step per stage,
    at each gradient in backward, and FSDP's transient buffers, full parameters and gradients
    in between; ``world``: thread-ranks, :class:`~minidp.tools.recorder.Threads`."""
    return [e for r in world.run(_memory_rank, sizes, timeout=120.0) for e in r]
