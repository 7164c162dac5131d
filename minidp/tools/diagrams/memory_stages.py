"""``memory_stages.png``: what each rank holds after one AdamW step, stage by stage.

Stacked bars per rank — weights, gradients, DDP's flat gradient buckets, optimizer state —
measured after a step of DDP, ZeRO-1, ZeRO-2 and FSDP at 2 and 4 thread-ranks
(``minidp.tools.recorder.memory``: the classroom's memory scene); a black tick marks the
ZeRO paper's formula for the stage (fp32 AdamW: p = g = 4, K = 8) plus DDP's buckets: with
torch's default ``gradient_as_bucket_view=False`` DDP and ZeRO-1 keep a second gradient copy
there, 20 bytes per parameter in all, not 16.

    python -m minidp diagrams --only memory

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

from pathlib import Path

from minidp.tools.diagrams.common import pyplot, save_figure
from minidp.tools.planner import plan
from minidp.tools.recorder import Threads, mlp
from minidp.tools.recorder.memory import STAGES, memory_events

PARTS = {  # the legend's name: (the memory event's field, its colour)
    "weights": ("params", "#4c72b0"),
    "grads": ("grads", "#dd8452"),
    "DDP's gradient buckets": ("buckets", "#c44e52"),
    "optimizer": ("optimizer", "#55a868"),
}


def draw(out: Path, quick: bool = False) -> Path:
    """Stacked per-rank bytes by stage at W = 2 and 4; ``quick``: a smaller model."""
    plt = pyplot()
    sizes = (64 if quick else 256,) * 5 + (10,)
    numel = sum(p.numel() for p in mlp(*sizes).parameters())
    stages, worlds = STAGES, (2, 4)
    fig, axes = plt.subplots(1, len(worlds), figsize=(12, 4.6), sharey=True)
    kib = 1024
    for ax, world in zip(axes, worlds):
        after = {(e["args"]["stage"], e["pid"]): e["args"]  # what each rank holds after a step
                 for e in memory_events(Threads(world), sizes)
                 if e["name"] == "memory" and e["args"]["point"] == "after step"}  # fmt: skip
        x, labels = 0.0, []
        for stage in stages:
            left = x
            for rank in range(world):
                bottom = 0.0
                for part, (field, colour) in PARTS.items():
                    value = after[(stage, rank)][field] / kib
                    label = part if (stage, rank) == ("ddp", 0) else None
                    ax.bar(x, value, bottom=bottom, color=colour, width=0.8, label=label)
                    bottom += value
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
