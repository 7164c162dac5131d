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

import minidp.comm
from minidp.comm import barrier  # the spec's own: not the wrapped one learners get
from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs.ddp import warm

LATE_S = 0.3  # the most rank 0 waits for the others before it saves (see learn)
_calls = threading.local()  # while a rank's learner runs: {"saves": n, "bare loads": n, "mark"}


def _recorded(real, key: str, bare=lambda args, kwargs: True):
    """``real``, counted in the rank's record; a rank other than 0 marks (touches its file)
    entering a barrier or after a load: rank 0 need not wait for it any longer (``learn``)."""

    @functools.wraps(real)
    def call(*args, **kwargs):
        record = getattr(_calls, "record", None) or {}
        if key in record:
            record[key] += bare(args, kwargs)
        if key == "barrier" and record.get("mark"):
            record["mark"].touch()  # before: the barrier returns only once rank 0 is there
        out = real(*args, **kwargs)
        if key == "bare loads" and record.get("mark"):
            record["mark"].touch()  # after: it read the file rank 0 has not replaced yet
        return out

    return call


def prepare() -> None:
    """In the zygote: save, load and the lesson's barrier note calls while a learner runs."""
    warm()
    if not hasattr(torch.save, "__wrapped__"):
        torch.save = _recorded(torch.save, "saves")
        bare = lambda args, kwargs: "map_location" not in kwargs and len(args) < 2
        torch.load = _recorded(torch.load, "bare loads", bare)
        minidp.comm.barrier = _recorded(minidp.comm.barrier, "barrier")


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
    marks = [path.with_name(f"{path.name}.{r}") for r in range(world)]  # (rank 0's: unused)
    if rank == 0:
        old = _trained(case["seed"], 1)  # yesterday's checkpoint
        torch.save({"model": old[0].state_dict(), "optimizer": old[1].state_dict()}, path)
        for m in marks:  # a slip diagnosed on this case earlier left its marks
            m.unlink(missing_ok=True)
    barrier(group)
    end = time.monotonic() + LATE_S
    while rank == 0 and time.monotonic() < end and not all(m.exists() for m in marks[1:]):
        time.sleep(0.002)  # rank 0 is late, until each other rank loaded, waits or returned
    _calls.record = record = {"saves": 0, "bare loads": 0, "mark": rank and marks[rank]}
    try:
        fn(model, opt, *fresh, str(path), group)
        if rank:
            marks[rank].touch()  # returned
    finally:
        _calls.record = None
    barrier(group)  # everyone has read the file before it goes
    if rank == 0:
        for p in (path, *marks):
            p.unlink(missing_ok=True)
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
    generated=1, diagnose=1, prepare=prepare)  # fmt: skip
