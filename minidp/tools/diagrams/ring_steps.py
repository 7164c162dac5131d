"""``ring_steps.png``: the book's ring all-reduce on 4 thread-ranks, one panel per step.

``demo ring``'s run (``minidp.tools.recorder.ring``), drawn as a rank x chunk grid: what
arrived, what is final, and an arrow per message.

    python -m minidp diagrams --only ring

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

from pathlib import Path

import torch

from minidp.tools.demo.ring import record_ring
from minidp.tools.demo.ring_view import REDUCE_SCATTER
from minidp.tools.diagrams.common import (
    AG_ARROW,
    ARRIVED,
    FINAL,
    IDLE,
    RS_ARROW,
    pyplot,
    save_figure,
)


def draw(out: Path, quick: bool = False) -> Path:
    """A rank x chunk grid per step of a real 4-rank ring all-reduce (one size: ``quick``
    changes nothing)."""
    plt = pyplot()
    world, numel = 4, 4
    run = record_ring(world, numel)
    final = run.grid(run.outputs)
    panels = [("start: each rank's own numbers", None, run.grid(run.inputs))]
    for s in run.steps:
        label = f"{s.phase} step {s.index + 1}/{world - 1}"
        panels.append((label, s, s.after))

    cols = world  # start + 3 reduce-scatter on top row, 3 all-gather + legend below
    fig, axes = plt.subplots(2, cols, figsize=(3.3 * cols, 7.4))
    cw, ch, gap = 1.0, 0.8, 0.45  # cell width/height, gutter for arrows

    def draw(ax, title, step, grid):
        ax.set_xlim(-0.9, world * (cw + gap) + 0.05)
        ax.set_ylim(world * ch + 0.05, -0.75)
        ax.axis("off")
        ax.set_title(title, fontsize=10.5, pad=4)
        arrived = {(m.dst, m.chunk) for m in step.moves} if step else set()
        for c in range(world):
            x0 = c * (cw + gap) + gap
            ax.text(x0 + cw / 2, -0.35, f"chunk {c}", ha="center", fontsize=8, color="#555")
            for r in range(world):
                v = int(grid[r][c][0])
                done = torch.equal(grid[r][c], final[r][c])
                colour = ARRIVED if (r, c) in arrived and not done else (FINAL if done else IDLE)
                edge, lw = ("#9aa5b1", 0.8)
                if (r, c) in arrived:  # a thick frame in the arrow's colour: what moved
                    edge, lw = (RS_ARROW if step.phase == REDUCE_SCATTER else AG_ARROW), 2.4
                ax.add_patch(
                    plt.Rectangle((x0, r * ch + 0.04), cw, ch - 0.08, fc=colour, ec=edge, lw=lw)
                )
                weight = "bold" if (r, c) in arrived else "normal"
                ax.text(
                    x0 + cw / 2, r * ch + ch / 2, f"{v}", ha="center", va="center",
                    fontsize=10, family="monospace", weight=weight,
                )  # fmt: skip
        for r in range(world):
            ax.text(-0.85, r * ch + ch / 2, f"rank {r}", va="center", fontsize=8.5)
        if step:
            colour = RS_ARROW if step.phase == REDUCE_SCATTER else AG_ARROW
            for m in step.moves:
                x = m.chunk * (cw + gap) + gap * 0.5
                y0, y1 = m.src * ch + ch / 2, m.dst * ch + ch / 2
                ax.annotate(
                    "", xy=(x, y1), xytext=(x, y0),
                    arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 1.6,
                                "shrinkA": 2, "shrinkB": 2},
                )  # fmt: skip

    for k, panel in enumerate(panels):
        draw(axes[k // cols][k % cols], *panel)
    legend_ax = axes[1][cols - 1]
    legend_ax.axis("off")
    items = [
        (ARRIVED, "arrived this step (a partial sum)"),
        (FINAL, "holds the final sum"),
        (IDLE, "not touched yet / stale"),
    ]
    for i, (colour, text) in enumerate(items):
        legend_ax.add_patch(
            plt.Rectangle((0.02, 0.86 - i * 0.1), 0.1, 0.07, fc=colour, ec="#9aa5b1")
        )
        legend_ax.text(0.16, 0.895 - i * 0.1, text, va="center", fontsize=9)
    for y, colour, text in ((0.54, RS_ARROW, "reduce-scatter: receiver adds its piece"),
                            (0.45, AG_ARROW, "all-gather: receiver keeps a copy")):  # fmt: skip
        arrow = {"arrowstyle": "-|>", "color": colour, "lw": 1.6}
        legend_ax.annotate("", xy=(0.12, y), xytext=(0.02, y), arrowprops=arrow)
        legend_ax.text(0.16, y, text, va="center", fontsize=9)
    s = numel * run.inputs[0].element_size()
    legend_ax.text(
        0.02,
        -0.02,
        f"rank r sends only to rank r{'+' if run.direction == 1 else '-'}1 (mod 4)\n"
        f"rank r holds multiples of 10^r:\ndigit r of a sum = rank r's piece is in it\n\n"
        f"each rank sent {run.data_bytes_sent[0]} bytes = 2(n-1)/n·S (S={s})\n"
        f"== torch.distributed.all_reduce: {run.equal}",
        fontsize=8.5,
        va="bottom",
    )
    fig.suptitle(
        "Ring all-reduce on 4 real ranks (the book's ring, minidp.textbook.collectives): "
        "reduce-scatter, then all-gather",
        fontsize=12.5,
    )
    return save_figure(fig, out / "ring_steps.png", rect=(0, 0, 1, 0.96))
