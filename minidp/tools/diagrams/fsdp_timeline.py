"""``fsdp_timeline.png``: one ``minidp.fully_shard`` training step on 2 rank processes.

Per rank, two rows: compute (each unit's forward and backward, and the waits for an
all-gather) and communication (each unit's all-gather and reduce-scatter on the
communication thread; ▼ = the moment an all-gather was issued). Prefetch shows as an
all-gather issued, and running, while the unit before it still computes.

    python -m minidp diagrams --only fsdp

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import torch

from minidp.tools.bench.verdict import machine
from minidp.tools.diagrams.common import AG_ARROW, RS_ARROW, pyplot, save_figure
from minidp.tools.diagrams.workloads import mlp, rank_data

COLOURS = {"forward": "#3a6ea5", "backward": "#2a9d8f", "wait": "#bbbbbb"}


def _fsdp_timeline_rank(rank: int, world: int, width: int, steps: int) -> dict:
    import minidp
    from minidp import trace

    torch.set_num_threads(1)
    model = mlp(width, 4)  # 5 linear layers: each one FSDP unit, the Sequential the root
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            minidp.fully_shard(layer)
    minidp.fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times, events = [], []
    for i, (xb, yb) in enumerate(rank_data(rank, steps, batch=256)):
        with trace.recording() if i == steps - 1 else contextlib.nullcontext() as rec:
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        if i == steps - 1:
            events = rec.events
    return {"events": events, "times": times[1:]}


def draw(out: Path, quick: bool = False) -> Path:
    """One traced FSDP step on 2 ranks (the last of a few, so the prefetch order is known)."""
    from minidp.launch import spawn

    plt = pyplot()
    width = 256 if quick else 1024
    res = spawn(_fsdp_timeline_rank, 2, width, 3 if quick else 6)
    events = [e for r in res for e in r["events"] if e["name"] not in ("send", "recv")]
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
    step_ms = sorted(res[0]["times"])[len(res[0]["times"]) // 2] * 1e3
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
