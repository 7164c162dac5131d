"""``bucket_sweep.png``: DDP step time against ``bucket_cap_mb``, minidp and torch.

2 rank processes, minidp's DDP with overlap on and off and torch's, one MLP; each point
the median of a few rounds' median steps (bars: min-max over the rounds), its bucket count
above it, and the fitted cost of one extra bucket for each: what makes minidp's curve slope.

    python -m minidp diagrams --only sweep

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from torch import nn

from minidp.tools.bench.abba import train_step
from minidp.tools.diagrams.common import pyplot, save_figure
from minidp.tools.recorder import mlp

SWEEP_CAPS_MB = (0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 25.0)
# 24 hidden layers, 23 of them 256 -> 256 (256 KiB weights); 1.52 M parameters, 6.1 MB of
# gradients
SWEEP_MODEL = (32, *(256,) * 24, 10)


def _times(net: nn.Module, data) -> list[float]:
    """Seconds of each training step of ``net`` over ``data`` (cross-entropy, SGD)."""
    opt, times = torch.optim.SGD(net.parameters(), lr=0.01), []
    for x, y in data:
        step = train_step(net, opt, x, y)
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return times


def _sweep_rank(rank: int, world: int, caps: tuple, steps: int, rounds: int) -> dict:
    import minidp

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(10 + rank)  # each rank its own batches
    data = [(torch.randn(128, 32, generator=g), torch.randint(0, 10, (128,), generator=g))
            for _ in range(steps + 3)]  # fmt: skip
    medians: dict = {}  # (name, cap) -> (median ms of each round, bucket count)
    # Rounds take turns over every setting, so a burst of other work on the machine hits
    # all settings alike; every round's median is kept, to draw the spread.
    for _ in range(rounds):
        for cap in caps:
            for name, wrapper, kw in (
                ("minidp", minidp.DistributedDataParallel, {}),
                ("minidp, no overlap", minidp.DistributedDataParallel, {"overlap": False}),
                ("torch", nn.parallel.DistributedDataParallel, {}),
            ):
                ddp = wrapper(mlp(*SWEEP_MODEL, act=nn.Tanh), bucket_cap_mb=cap, **kw)
                ms = statistics.median(_times(ddp, data)[3:]) * 1e3
                n_buckets = len(ddp.reducer.assignment) if name == "minidp" else None
                medians.setdefault((name, cap), ([], n_buckets))[0].append(ms)
    return medians


def draw(out: Path, quick: bool = False) -> Path:
    """DDP step time against bucket_cap_mb, minidp and torch, on 2 rank processes; ``quick``:
    the two extreme sizes, fewer steps, one round."""
    from minidp.launch import spawn

    plt = pyplot()
    caps = (SWEEP_CAPS_MB[0], SWEEP_CAPS_MB[-1]) if quick else SWEEP_CAPS_MB
    res = spawn(_sweep_rank, 2, caps, 3 if quick else 8, 1 if quick else 3)[0]
    fig, ax = plt.subplots(figsize=(8.6, 4.8))
    for name, colour, style in (
        ("minidp", "#e07a1f", "o-"),
        ("minidp, no overlap", "#e07a1f", "o:"),
        ("torch", "#3a6ea5", "s-"),
    ):
        rounds = [res[(name, c)][0] for c in caps]  # per cap: one median per round
        ys = [statistics.median(r) for r in rounds]
        spread = [
            [y - min(r) for y, r in zip(ys, rounds)],
            [max(r) - y for y, r in zip(ys, rounds)],
        ]
        label = f"{name} DDP" if "," not in name else "minidp DDP, overlap=False"
        ax.errorbar(caps, ys, yerr=spread, fmt=style, color=colour, capsize=3, label=label)
    buckets = [res[("minidp", c)][1] for c in caps]
    for c, nb in zip(caps, buckets):
        y = statistics.median(res[("minidp", c)][0])
        ax.annotate(f"{nb} bucket{'s' if nb > 1 else ''}", (c, y),
                    textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)  # fmt: skip
    # The slope, measured: ms per extra bucket from a straight-line fit of step time on the
    # bucket count (torch uses the same bucket assignment, so the same counts).
    per_bucket = {
        name: statistics.linear_regression(
            buckets, [statistics.median(res[(name, c)][0]) for c in caps]
        ).slope
        for name in ("minidp", "torch")
    }
    ax.text(
        0.98, 0.62,
        f"each extra bucket costs (fitted):\nminidp {per_bucket['minidp']:+.2f} ms: a Python ring "
        "all-reduce\n(header check + 2(n-1) send/recv calls)\n"
        f"torch {per_bucket['torch']:+.2f} ms: its C++ reducer",
        transform=ax.transAxes, ha="right", va="top", fontsize=8.5,
        bbox={"boxstyle": "round", "fc": "white", "ec": "#ccc"},
    )  # fmt: skip
    ax.set_xscale("log")
    ax.margins(y=0.15)  # room for the bucket counts above the highest points
    ax.set_xlabel("bucket_cap_mb (log scale; 25 is the default)")
    ax.set_ylabel("median ms per training step")
    with torch.random.fork_rng(devices=[]):  # mlp() reseeds torch: keep the caller's RNG
        params = sum(p.numel() for p in mlp(*SWEEP_MODEL).parameters())  # counted, not typed
    ax.set_title(
        f"Bucket size sweep: 2 rank processes, MLP of {len(SWEEP_MODEL) - 2} layers x 256 "
        f"({params / 1e6:.1f}M parameters), gloo on loopback\nrounds take turns over the "
        "settings; median of the rounds, bars min-max; bucket counts above",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, out / "bucket_sweep.png")
