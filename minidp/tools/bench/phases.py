"""A training step split into its phases, timed on both sides of a pair: where a gap is.

    python -m minidp bench fsdp --breakdown
    python -m minidp bench zero --breakdown

An ABBA verdict (``abba.py``) says *whether* minidp's step is slower than torch's; this
says *where*: forward (with ``zero_grad`` and the loss), backward, optimizer step, each
after a barrier and counted at the slowest rank, the two sides taking turns step by step
so background load hits both alike. Medians, not a verdict: a hint where to look.

Communication lands in the phase whose call waits for it: DDP's all-reduce in backward
(its last bucket), ZeRO-1's broadcast and ZeRO-2's all-gather in the optimizer step,
FSDP's all-gathers in forward and backward.

Test: ``pytest tests/test_bench_sharded.py``
"""

from __future__ import annotations

import statistics
import time

import torch.distributed as dist
from torch import nn

from minidp.tools.bench.abba import slowest_rank

PHASES = ("forward", "backward", "step")


def time_phases(net: nn.Module, opt, x, y) -> list[float]:
    """One step, its three phases' seconds (after a barrier, so ranks start together)."""
    dist.barrier()
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = nn.functional.cross_entropy(net(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    return [t1 - t0, t2 - t1, time.perf_counter() - t2]


def take_turns(sides: dict[str, tuple], x, y, steps: int) -> dict[str, list[list[float]]]:
    """``{name: [[forward, backward, step] per step]}`` at the slowest rank, for
    ``sides = {name: (net, opt)}``, one step of each side in turn, ``steps`` times."""
    times: dict[str, list[list[float]]] = {name: [] for name in sides}
    for _ in range(steps):
        for name, (net, opt) in sides.items():
            times[name].append(slowest_rank(time_phases(net, opt, x, y)))
    return times


def format_phases(times: dict[str, list[list[float]]], indent: str = "  ") -> list[str]:
    """Lines of a table: one row per phase, median ms per side, and the second side's over
    the first's where there are two (torch's first, minidp's second)."""
    sides = list(times)
    steps = len(times[sides[0]])
    lines = [
        f"{indent}phases, median ms at the slowest rank ({steps} steps each, sides taking turns;",
        f"{indent}  forward includes zero_grad and the loss):",
        f"{indent}{'phase':<10}"
        + "".join(f"{n:>24}" for n in sides)
        + ("   ratio" if len(sides) == 2 else ""),
    ]
    for i, phase in enumerate((*PHASES, "total")):
        if phase == "total":
            med = [statistics.median(sum(t) for t in times[n]) * 1e3 for n in sides]
        else:
            med = [statistics.median(t[i] for t in times[n]) * 1e3 for n in sides]
        ratio = f"   {med[1] / med[0]:.2f}x" if len(med) == 2 else ""
        lines.append(f"{indent}{phase:<10}" + "".join(f"{m:>24.1f}" for m in med) + ratio)
    return lines
