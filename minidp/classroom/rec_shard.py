"""Record the sharded scenes for real: per-rank memory by stage, and one FSDP step.

    python -m minidp classroom --no-serve --only memory,fsdp --out /tmp/cls

Memory: on ``world`` thread-ranks, the same MLP is trained one AdamW step under DDP,
ZeRO-1, ZeRO-2 and FSDP (``minidp.zero.stages.build``), and what each rank holds is
measured from the real tensors (``minidp.zero.memory.measure``: parameters, gradients,
optimizer state, DDP's buckets) after building, after forward, after backward and after
the optimizer step — one ``memory`` event per rank per point.

FSDP: every linear layer is its own ``fully_shard`` unit. Step 1 runs untraced (the root
learns the forward order it will prefetch in); step 2 is recorded. The library emits
``issue all-gather``, ``all-gather``, ``forward``/``backward`` per unit and
``reduce-scatter``; the moment a unit's full parameters are allocated or dropped is
observed here by wrapping that unit's own ``gather``/``free`` (they still run unchanged),
with the bytes of its full parameters.

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp import trace

LANE = "classroom"
STAGES = ("ddp", "zero1", "zero2", "fsdp")
POINTS = ("built", "after forward", "after backward", "after step")


def _model(width: int, depth: int = 3) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


def _memory_rank(rank: int, world: int, width: int) -> list[dict]:
    from minidp.zero.memory import measure
    from minidp.zero.stages import build

    model = _model(width)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(16, width, generator=g), torch.randn(16, 4, generator=g)
    events = []

    def note(stage: str, point: str, wrapped, opt) -> None:
        u = measure(wrapped, opt)
        args = {"stage": stage, "point": point, "params": u.params, "grads": u.grads,
                "optimizer": u.optimizer, "buckets": u.buckets}  # fmt: skip
        events.append({"name": "memory", "ph": "i", "s": "t", "ts": trace.now_us(),
                       "pid": rank, "tid": LANE, "args": args})  # fmt: skip

    for stage in STAGES:
        wrapped, opt = build(stage, model, torch.optim.AdamW, lr=1e-3)
        note(stage, POINTS[0], wrapped, opt)
        opt.zero_grad()
        loss = nn.functional.mse_loss(wrapped(x), y)
        note(stage, POINTS[1], wrapped, opt)
        loss.backward()
        note(stage, POINTS[2], wrapped, opt)
        opt.step()
        note(stage, POINTS[3], wrapped, opt)
    return events


def memory_events(world: int, width: int = 64) -> list[dict]:
    """Measured model-state bytes per rank, 4 points of one step, for each stage."""
    from minidp.launch import run_threads

    if world < 2:
        raise ValueError(f"classroom memory: --world-size must be at least 2, got {world}")
    return [e for r in run_threads(_memory_rank, world, width, timeout=60.0) for e in r]


def _observe(unit, rank: int) -> None:
    """Wrap ``unit.gather``/``unit.free`` (this instance only) to note each call's time."""
    nbytes = sum(s.numel() * unit.param_dtype.itemsize for s in unit.shapes)
    gather, free = unit.gather, unit.free

    def gathered() -> None:
        gather()
        trace.instant("unit gathered", lane=LANE, rank=rank, unit=unit.label, bytes=nbytes)

    def freed() -> None:
        free()
        trace.instant("unit freed", lane=LANE, rank=rank, unit=unit.label, bytes=nbytes)

    unit.gather, unit.free = gathered, freed


def _fsdp_rank(rank: int, world: int, width: int) -> list[dict]:
    from minidp.fsdp import fully_shard
    from minidp.fsdp.wrap import unit_of

    model = _model(width)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for step in range(2):
        x, y = torch.randn(16, width, generator=g), torch.randn(16, 4, generator=g)
        if step == 1:
            for m in model.modules():
                if (u := unit_of(m)) is not None:
                    _observe(u, rank)
        with trace.recording() if step == 1 else _nothing() as rec:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    shards = sum(p.numel() * p.element_size() for p in model.parameters())
    mine = [e for e in rec.events if e["pid"] == rank and e["name"] not in ("send", "recv")]
    start = min(e["ts"] for e in mine)
    mine.append({"name": "fsdp shards", "ph": "i", "s": "t", "ts": start, "pid": rank,
                 "tid": LANE, "args": {"bytes": shards, "world": world}})  # fmt: skip
    return mine


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def fsdp_events(world: int, width: int = 64) -> list[dict]:
    """One traced FSDP step (after a first, untraced one) on ``world`` thread-ranks."""
    from minidp.launch import run_threads

    if world < 2:
        raise ValueError(f"classroom fsdp: --world-size must be at least 2, got {world}")
    return [e for r in run_threads(_fsdp_rank, world, width, timeout=60.0) for e in r]
