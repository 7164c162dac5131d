"""``checkpoint`` (lesson 15) vs ``torch.save`` / ``torch.load`` of the same state; rank 0 alone
saves, loads name ``map_location``; rank 0 is late and an old file waits: a rank must wait."""

import functools
import io
import os
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch import nn

from minidp.comm import barrier
from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs.ddp import warm

LATE_S = 0.3
_calls = threading.local()  # while a rank's learner runs: {"saves": n, "bare loads": n}


def _recorded(real, key: str, bare=lambda args, kwargs: True):
    @functools.wraps(real)
    def call(*args, **kwargs):
        if getattr(_calls, "record", None) is not None:
            _calls.record[key] += bare(args, kwargs)
        return real(*args, **kwargs)

    return call


def prepare() -> None:
    """In the zygote: ``torch.save`` / ``torch.load`` note the calls while a learner runs."""
    warm()
    if not hasattr(torch.save, "__wrapped__"):
        torch.save = _recorded(torch.save, "saves")
        bare = lambda args, kwargs: "map_location" not in kwargs and len(args) < 2
        torch.load = _recorded(torch.load, "bare loads", bare)


def _trained(seed: int, steps: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 4, generator=g)).square().mean().backward()
        opt.step()
    return model, opt


def _state(model: nn.Module, opt: torch.optim.Optimizer) -> list:
    """What a resume needs: weights, then momentum buffers (None if absent)."""
    momenta = [opt.state.get(p, {}).get("momentum_buffer") for p in model.parameters()]
    return [t.detach().clone() for t in model.state_dict().values()] + momenta


def learn(fn, case, rank, world, group):
    path = Path(tempfile.gettempdir()) / f"minidp-exercise-{os.getpid()}-{world}-{case['seed']}.pt"
    model, opt = _trained(case["seed"], case["steps"])  # the same on every rank
    fresh = _trained(case["seed"] + 1000, 0)  # a restarted job
    if rank == 0:
        old = _trained(case["seed"], 1)  # yesterday's checkpoint
        torch.save({"model": old[0].state_dict(), "optimizer": old[1].state_dict()}, path)
    barrier(group)
    if rank == 0:
        time.sleep(LATE_S)  # rank 0 is late: a loader that does not wait reads the old file
    _calls.record = record = {"saves": 0, "bare loads": 0}
    try:
        fn(model, opt, *fresh, str(path), group)
    finally:
        _calls.record = None
    barrier(group)  # everyone has read the file before it goes
    if rank == 0:
        path.unlink(missing_ok=True)
    return [_state(*fresh), rank != 0 and record["saves"] > 0, record["bare loads"]]


def expect(case, rank, world, group):
    model, opt = _trained(case["seed"], case["steps"])
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="cpu", weights_only=True)
    ref_model, ref_opt = _trained(case["seed"] + 1000, 0)
    ref_model.load_state_dict(loaded["model"])
    ref_opt.load_state_dict(loaded["optimizer"])
    return Expected([_state(ref_model, ref_opt), False, 0],
                    ["the fresh model's and optimizer's state after the load",
                     "saved, on a rank other than 0", "loads without map_location"])  # fmt: skip


EXERCISE = Exercise(
    reference="torch.save / torch.load(map_location='cpu', weights_only=True) of the same state; "
    "rank 0 alone saves, every load names map_location", learn=learn, expect=expect,
    cases=({"world": 1, "steps": 2, "seed": 0}, {"world": 2, "steps": 2, "seed": 1},
           {"world": 3, "steps": 3, "seed": 2}, {"world": 2, "steps": 1, "seed": 3, "spare": 1}),
    draw=lambda rng: {"world": rng.randint(1, 3), "steps": rng.randint(1, 3),
                      "seed": rng.randint(4, 99)},
    generated=1, diagnose=1, prepare=prepare)  # (each case waits LATE_S)  # fmt: skip
