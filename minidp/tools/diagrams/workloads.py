"""The models and training loops the DP and DDP pictures measure.

Shared by ``dp_pipeline``, ``ddp_timeline`` and ``bucket_sweep`` so that their numbers
come from the same kind of model, trained the same way.

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch import nn

from minidp import trace


def mlp(width: int, depth: int, seed: int = 0) -> torch.nn.Sequential:
    """An MLP from 32 inputs to 10 classes, ``depth`` hidden layers of ``width``; seeded, so
    every rank builds the same weights."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    sizes = [32] + [width] * depth
    for a, b in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def ddp_steps(ddp, data, record: int | None = None) -> tuple[list[float], list[dict]]:
    """Train on ``data``; return per-step times and the trace events of step ``record``."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    times, events = [], []
    for i, (xb, yb) in enumerate(data):
        with trace.recording() if i == record else contextlib.nullcontext() as rec:
            t0 = time.perf_counter()
            opt.zero_grad()
            with trace.span("forward + loss", lane="compute"):
                loss = nn.functional.cross_entropy(ddp(xb), yb)
            with trace.span("backward", lane="compute"):
                loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        if i == record:
            events = rec.events
    return times, events


def rank_data(rank: int, steps: int, batch: int = 128):
    """``steps`` batches of random inputs and labels, different on each rank."""
    g = torch.Generator().manual_seed(10 + rank)
    return [
        (torch.randn(batch, 32, generator=g), torch.randint(0, 10, (batch,), generator=g))
        for _ in range(steps)
    ]
