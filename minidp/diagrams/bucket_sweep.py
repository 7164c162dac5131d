"""``bucket_sweep.png``: DDP step time against ``bucket_cap_mb``, minidp and torch.

2 rank processes (gloo on loopback), minidp's DDP with overlap on and off and torch's
DDP, one MLP; each point is the best of a few rounds of median step times, with the
number of buckets written above it.

    python -m minidp diagrams --only sweep

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

from pathlib import Path

import torch

from minidp.diagrams.common import pyplot, save_figure
from minidp.diagrams.workloads import ddp_steps, mlp, rank_data

SWEEP_CAPS_MB = (0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 25.0)
SWEEP_MODEL = (256, 24)  # width, depth: 24 weights of 256 KiB, ~6.4 MB of gradients


def _sweep_rank(rank: int, world: int, caps: tuple, steps: int, rounds: int) -> dict:
    import statistics

    from torch import nn

    import minidp

    torch.set_num_threads(1)
    data = rank_data(rank, steps + 3)
    best: dict = {}
    # Rounds take turns over every setting, so a burst of other work on the machine hits
    # all settings alike; the best (least disturbed) median of the rounds is kept.
    for _ in range(rounds):
        for cap in caps:
            for name, wrapper, kw in (
                ("minidp", minidp.DistributedDataParallel, {}),
                ("minidp, no overlap", minidp.DistributedDataParallel, {"overlap": False}),
                ("torch", nn.parallel.DistributedDataParallel, {}),
            ):
                ddp = wrapper(mlp(*SWEEP_MODEL), bucket_cap_mb=cap, **kw)
                times, _ = ddp_steps(ddp, data)
                ms = statistics.median(times[3:]) * 1e3
                n_buckets = len(ddp.reducer.assignment) if name == "minidp" else None
                old = best.get((name, cap))
                best[(name, cap)] = (min(ms, old[0]) if old else ms, n_buckets)
    return best


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
        ys = [res[(name, c)][0] for c in caps]
        ax.plot(caps, ys, style, color=colour, label=f"{name} DDP" if "," not in name else
                "minidp DDP, overlap=False")  # fmt: skip
    for c in caps:
        nb = res[("minidp", c)][1]
        ax.annotate(f"{nb} bucket{'s' if nb > 1 else ''}", (c, res[("minidp", c)][0]),
                    textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8)  # fmt: skip
    ax.set_xscale("log")
    ax.margins(y=0.15)  # room for the bucket counts above the highest points
    ax.set_xlabel("bucket_cap_mb (log scale; 25 is the default)")
    ax.set_ylabel("median ms per training step")
    ax.set_title(
        f"Bucket size sweep: 2 rank processes, MLP of {SWEEP_MODEL[1]} layers x {SWEEP_MODEL[0]} "
        "(1.6M parameters), gloo on loopback\nbest of 3 rounds of median step times; "
        "the number of buckets is written above each point",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, out / "bucket_sweep.png")
