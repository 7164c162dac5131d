"""Record ``DistributedDataParallel`` steps for real: hooks, buckets, overlap.

    python -m minidp demo ddp                 # these events, printed
    python -m minidp diagrams --only ddp      # drawn, overlap on and off

Rank processes (overlap is about time) train the same MLP in minidp's DDP (MSE, SGD); step
0 records the order gradients arrive in, the buckets are rebuilt in it at the next forward.
The steps in ``record`` are traced: the library emits ``forward``, ``ddp buckets`` (the
layout this backward fills), ``grad ready``, ``bucket launch``, ``all-reduce bucket N``,
``bucket finish`` and ``wait for buckets``; added here, a ``backward`` span (what a user's
script adds) and a ``ddp step`` span per step (its time). Several ``overlap`` settings take
turns step by step. ``check=True`` (the demo) starts the ranks ``spread`` apart and adds a
``ddp check`` per rank: a weight before and after the broadcast, a gradient before and
after averaging, ``torch.equal`` of every parameter against torch's DDP trained alike.

Test: ``pytest tests/test_classroom.py tests/test_ddp_misc.py -k demo``
"""

from __future__ import annotations

import contextlib
import copy

import torch
from torch import nn

from minidp import trace
from minidp.tools.planner.stages import train_step
from minidp.tools.recorder import LANE, instant, mlp, own


def cap_for(sizes: tuple, buckets: float) -> float:
    """The ``bucket_cap_mb`` (MiB, as torch counts it) that cuts ``mlp(*sizes)``'s gradients
    into about ``buckets`` buckets (plain parameters: each one's bytes are its own)."""
    model_bytes = sum(p.nbytes for p in mlp(*sizes).parameters())  # global: nothing sharded
    return model_bytes / (buckets + 0.5) / 2**20


def _ddp_rank(rank: int, world: int, sizes, cap_mb, o: dict) -> list[dict]:
    import minidp

    if o["threads"]:
        torch.set_num_threads(o["threads"])
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    data = [(torch.randn(o["batch"], sizes[0], generator=g),
             torch.randn(o["batch"], sizes[-1], generator=g))
            for _ in range(o["steps"])]  # fmt: skip
    nets, events, check = {}, [], {}
    for overlap in o["overlap"]:
        model = mlp(*sizes, act=o["act"])
        with torch.no_grad():  # ranks start apart (spread > 0): the broadcast evens them
            for p in model.parameters():
                p.add_(o["spread"] * rank)
        check["before"] = model[0].weight[0, 0].item()
        ref = None  # torch's, on the same start (it broadcasts too)
        if o["check"]:
            ref = nn.parallel.DistributedDataParallel(copy.deepcopy(model), bucket_cap_mb=cap_mb)
        ddp = minidp.DistributedDataParallel(model, bucket_cap_mb=cap_mb, overlap=overlap)
        check["after"] = model[0].weight[0, 0].item()
        nets[overlap] = (ddp, torch.optim.SGD(ddp.parameters(), lr=o["lr"]), ref)
    for i, (x, y) in enumerate(data):
        for overlap, (ddp, opt, _) in nets.items():
            if i in o["record"] and o["check"]:  # this rank's own gradient, before averaging
                local = copy.deepcopy(ddp.module)
                nn.functional.mse_loss(local(x), y).backward()
                check["local_grad"] = local[-1].bias.grad[:4].tolist()
            t0 = trace.now_us()
            with trace.recording() if i in o["record"] else contextlib.nullcontext() as rec:
                opt.zero_grad(set_to_none=True)
                loss = nn.functional.mse_loss(ddp(x), y)
                with trace.span("backward", lane="compute"):
                    loss.backward()
            if rec is not None:
                events += own(rec.events, rank)
                check["avg_grad"] = ddp.module[-1].bias.grad[:4].tolist()
            opt.step()
            args = {"step": i, "overlap": overlap}
            events.append({"name": "ddp step", "ph": "X", "ts": t0, "dur": trace.now_us() - t0,
                           "pid": rank, "tid": LANE, "args": args})  # fmt: skip
    if o["check"]:  # torch's DDP, the same steps
        ddp, _, ref = nets[o["overlap"][0]]
        ref_opt = torch.optim.SGD(ref.parameters(), lr=o["lr"])
        for x, y in data:
            train_step(ref, ref_opt, x, y, nn.functional.mse_loss)
        pairs = zip(ref.module.parameters(), ddp.module.parameters())
        check["torch_equal"] = [torch.equal(a, b) for a, b in pairs]
        events.append(instant("ddp check", trace.now_us(), rank, **check))
    return events


def ddp_events(world, sizes: tuple, cap_mb: float, *, batch: int = 64, steps: int = 2,
               record=(1,), overlap=(True,), lr: float = 0.01, act=nn.ReLU, threads: int = 0,
               spread: float = 0.0, check: bool = False) -> list[dict]:  # fmt: skip
    """DDP on ``world`` (a ProcessWorld) over ``mlp(*sizes)``: ``steps`` steps, those in
    ``record`` recorded, every rank's events in one list."""
    o = {"batch": batch, "steps": steps, "record": tuple(record), "overlap": tuple(overlap),
         "lr": lr, "act": act, "threads": threads, "spread": spread, "check": check}  # fmt: skip
    return [e for r in world.run(_ddp_rank, sizes, cap_mb, o, timeout=300.0) for e in r]


def in_step(events: list[dict], rank: int, step: int, overlap: bool = True) -> list[dict]:
    """``rank``'s events of one recorded step (those within its ``ddp step`` span)."""
    (s,) = [e for e in events if e["name"] == "ddp step" and e["pid"] == rank
            and e["args"] == {"step": step, "overlap": overlap}]  # fmt: skip
    return [e for e in events if e["pid"] == rank and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]
            and e is not s]  # fmt: skip
