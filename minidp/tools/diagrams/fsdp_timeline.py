"""``fsdp_timeline.png``: one ``minidp.fully_shard`` training step on 2 rank processes.

Per rank: compute (each unit's forward and backward, the waits for an all-gather) and
communication (its all-gathers and reduce-scatters; ▼ = an all-gather issued). Prefetch
shows as an all-gather issued, and running, while the unit before it still computes.
Recorded by ``minidp.tools.recorder.fsdp``, the run the classroom's FSDP scene shows.

    python -m minidp diagrams --only fsdp

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from minidp.launch import ProcessWorld
from minidp.tools.bench.verdict import machine
from minidp.tools.diagrams.common import AG_ARROW, RS_ARROW, pyplot, save_figure
from minidp.tools.recorder.fsdp import fsdp_events

COLOURS = {"forward": "#3a6ea5", "backward": "#2a9d8f", "wait": "#bbbbbb"}


def draw(out: Path, quick: bool = False) -> Path:
    """One traced FSDP step on 2 ranks (the last of a few, so the prefetch order is known)."""
    plt = pyplot()
    width = 256 if quick else 1024
    with ProcessWorld(2, timeout=300) as world:  # 5 linear layers: each one unit
        events = fsdp_events(world, (32,) + (width,) * 4 + (10,), steps=3 if quick else 6,
                             batch=256, last=True, act=nn.Tanh, threads=1)  # fmt: skip
    times = [e["dur"] / 1e6 for e in events if e["name"] == "fsdp step" and e["pid"] == 0]
    events = [e for e in events if e["name"] != "fsdp step"]
    start = min(e["ts"] for e in events)
    rows = [(rank, lane) for rank in (0, 1) for lane in ("compute", "comm")]
    y_of = {key: i for i, key in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(12.5, 5.0))
    for e in sorted(events, key=lambda e: -e.get("dur", 0)):  # long spans below short ones
        name, t = e["name"], (e["ts"] - start) / 1e3
        if name.endswith(" root"):
            continue  # the root has no parameters here; its spans enclose everything
        if e["ph"] == "X" and e["tid"] in ("compute", "comm"):
            kind = name.split()[0]
            colour = {"all-gather": AG_ARROW, "reduce-scatter": RS_ARROW}.get(
                kind, COLOURS.get(kind, "#888888")
            )
            y = y_of[(e["pid"], e["tid"])]
            height = 0.3 if kind == "wait" else 0.62
            ax.barh(y, e["dur"] / 1e3, left=t, height=height, color=colour, edgecolor="white")
            label = name.replace("all-gather unit ", "AG").replace("reduce-scatter unit ", "RS")
            label = label.replace("forward unit ", "F").replace("backward unit ", "B")
            if kind != "wait" and e["dur"] / 1e3 > 0.012 * _span(events):
                ax.text(t + e["dur"] / 2e3, y, label, ha="center", va="center", fontsize=7.5,
                        color="white")  # fmt: skip
        elif name.startswith("issue all-gather"):
            ax.plot(t, y_of[(e["pid"], "comm")] - 0.42, marker="v", color=AG_ARROW, ms=5)
    ax.set_yticks(range(len(rows)), [f"rank {r}: {lane}" for r, lane in rows])
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(
        "ms since the step started.  F/B = a unit's forward/backward, AG = all-gather, "
        "RS = reduce-scatter, ▼ = all-gather issued,\n"
        "grey = compute waiting for an all-gather (at the end: for the reduce-scatters)"
    )
    step_ms = sorted(times[1:])[len(times[1:]) // 2] * 1e3
    fig.suptitle(
        f"minidp.fully_shard on 2 rank processes (gloo): 5 linear units of width {width}, "
        f"median step {step_ms:.0f} ms\n"
        "each unit's all-gather is issued while the unit before it computes (prefetch); "
        "backward re-gathers in reverse and reduce-scatters each unit's gradients.\n"
        "One communication thread: a reduce-scatter and the next all-gather queue behind "
        "each other (FSDP2 on GPUs gives them separate streams).\n"
        f"{machine()}",
        fontsize=9.5,
    )
    return save_figure(fig, out / "fsdp_timeline.png", rect=(0, 0, 1, 0.87))


def _span(events: list[dict]) -> float:
    return (max(e["ts"] + e.get("dur", 0) for e in events) - min(e["ts"] for e in events)) / 1e3
