"""``memory_stages.png``: what each rank holds after one AdamW step, stage by stage.

Stacked bars per rank — weights, gradients, DDP's flat gradient buckets, optimizer state —
read from the real tensors (``minidp.tools.planner.memory.measure``) after one step of DDP, ZeRO-1,
ZeRO-2 and, where ``minidp.fsdp`` is present, FSDP, at 2 and 4 thread-ranks; a black tick
marks the ZeRO paper's formula for the stage (fp32 AdamW: p = g = 4, K = 8) plus the
buckets: with torch's default ``gradient_as_bucket_view=False`` DDP and ZeRO-1 (which runs
on DDP) keep a second gradient copy there, 4 bytes per parameter — 20 in all, not 16.

    python -m minidp diagrams --only memory

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

from minidp.tools.diagrams.common import pyplot, save_figure

COLOURS = {
    "weights": "#4c72b0",
    "grads": "#dd8452",
    "DDP's gradient buckets": "#c44e52",
    "optimizer": "#55a868",
}


def _model(width: int) -> nn.Module:
    torch.manual_seed(0)
    layers = [m for _ in range(4) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def _measure_rank(rank: int, world: int, model: nn.Module, stages: list[str]) -> dict:
    from minidp.tools.planner.stages import step_and_measure

    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(8, model[0].in_features, generator=g), torch.randint(0, 10, (8,))
    loss = nn.functional.cross_entropy
    return {s: step_and_measure(s, model, x, y, loss, torch.optim.AdamW, lr=1e-3) for s in stages}


def draw(out: Path, quick: bool = False) -> Path:
    """Stacked per-rank bytes by stage at W = 2 and 4; ``quick``: a smaller model."""
    from minidp.launch import run_threads
    from minidp.tools.planner import plan

    plt = pyplot()
    model = _model(64 if quick else 256)
    numel = sum(p.numel() for p in model.parameters())
    stages = ["ddp", "zero1", "zero2"]
    if importlib.util.find_spec("minidp.fsdp") is not None:
        stages.append("fsdp")
    worlds = (2, 4)
    fig, axes = plt.subplots(1, len(worlds), figsize=(12, 4.6), sharey=True)
    kib = 1024
    for ax, world in zip(axes, worlds):
        results = run_threads(_measure_rank, world, model, stages, timeout=120.0)
        x, labels = 0.0, []
        for stage in stages:
            left = x
            for rank, res in enumerate(results):
                u = res[stage]
                bottom = 0.0
                for part, value in (
                    ("weights", u.params),
                    ("grads", u.grads),
                    ("DDP's gradient buckets", u.buckets),
                    ("optimizer", u.optimizer),
                ):
                    ax.bar(
                        x,
                        value / kib,
                        bottom=bottom,
                        color=COLOURS[part],
                        width=0.8,
                        label=part if (stage, rank) == ("ddp", 0) else None,
                    )
                    bottom += value / kib
                labels.append((x, f"r{rank}"))
                x += 1
            formula = sum(plan.stage_bytes(stage, numel, world, 4, 4, 8))
            formula = (formula + plan.bucket_bytes(stage, numel, 4)) / kib  # 4Ψ or nothing
            ax.hlines(
                formula,
                left - 0.45,
                x - 0.55,
                colors="#111",
                linestyles=":",
                lw=1.5,
                label="ZeRO formula + buckets" if stage == "ddp" else None,
            )
            ax.text(
                (left + x - 1) / 2,
                -0.09,
                plan.STAGE_NAMES[stage],
                ha="center",
                va="top",
                transform=ax.get_xaxis_transform(),
                fontsize=9,
            )
            x += 0.8
        ax.set_xticks([p for p, _ in labels], [t for _, t in labels], fontsize=7)
        ax.set_title(f"{world} ranks")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("KiB held by the rank after one step")
    axes[0].legend(fontsize=8.5, loc="upper right")
    fig.suptitle(
        f"Model states per rank, measured from the tensors: MLP of {numel:,} parameters, fp32 "
        "AdamW\n(16 bytes/parameter replicated; DDP and ZeRO-1 + 4 in DDP's flat gradient "
        "buckets, torch's default gradient_as_bucket_view=False)",
        fontsize=11,
    )
    return save_figure(fig, out / "memory_stages.png", rect=(0, 0.04, 1, 0.92))
