"""``ddp_timeline.png``: one ``minidp.DistributedDataParallel`` step on 2 rank processes.

Per rank: forward and backward, the gradient-ready hooks and the bucket all-reduces —
during the backward with overlap on, all after it with overlap off. The step drawn is
after the bucket rebuild, recorded by ``minidp.tools.recorder.ddp`` (``demo ddp``'s run).

    python -m minidp diagrams --only ddp

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path

from torch import nn

from minidp.launch import ProcessWorld
from minidp.tools.bench.verdict import compare, machine
from minidp.tools.diagrams.common import pyplot, save_figure
from minidp.tools.recorder.ddp import ddp_events, in_step

LANE_LABELS = {"compute": "forward/backward", "hooks": "grad-ready hooks", "comm": "all-reduces"}
SIZES = (32, 1024, 1024, 1024, 1024, 1024, 10)  # 4.4M parameters


def draw(out: Path, quick: bool = False) -> Path:
    """One traced DDP step on 2 ranks, overlap on and off (taking turns step by step):
    buckets vs backward; ``quick``: fewer steps before the one drawn, for the median."""
    plt = pyplot()
    cap = 2.0
    with ProcessWorld(2, timeout=300) as world:  # step 3: after the bucket rebuild
        trace = ddp_events(world, SIZES, cap, batch=128, steps=6 if quick else 14, record=(3,),
                           overlap=(True, False), act=nn.Tanh, threads=1)  # fmt: skip
    times = {o: [e["dur"] / 1e6 for e in trace if e["name"] == "ddp step" and e["pid"] == 0
                 and e["args"]["overlap"] == o and e["args"]["step"] >= 2]
             for o in (True, False)}  # fmt: skip
    fig, axes = plt.subplots(2, 1, figsize=(12.5, 8.2), sharex=True)
    for ax, overlap in zip(axes, (True, False)):
        events = in_step(trace, 0, 3, overlap) + in_step(trace, 1, 3, overlap)
        median_ms = statistics.median(times[overlap]) * 1e3
        # the long spans first, so the shorter ones drawn later stay visible on top
        events.sort(key=lambda e: -e.get("dur", 0))
        start = min(e["ts"] for e in events if e["name"] == "forward")
        rows = []  # (rank, lane) -> y
        for rank in (0, 1):
            rows += [(rank, "compute"), (rank, "hooks"), (rank, "comm")]
        y_of = {key: i for i, key in enumerate(rows)}
        for e in events:
            lane = {"backward": "hooks"}.get(e["tid"], e["tid"])
            if e["name"] in ("wait for buckets",):
                lane = "compute"
            key = (e["pid"], lane)
            if key not in y_of:
                continue
            y, t = y_of[key], (e["ts"] - start) / 1e3
            if e["ph"] == "X":
                name = e["name"]
                colour = {"forward": "#3a6ea5", "backward": "#2a9d8f",
                          "wait for buckets": "#bbbbbb"}.get(name, "#e07a1f")  # fmt: skip
                height = 0.36 if name == "wait for buckets" else 0.62
                ax.barh(y, e["dur"] / 1e3, left=t, height=height, color=colour, edgecolor="white")
                label = name.replace("all-reduce bucket ", "b")
                if name == "backward":  # its end is covered by "wait for buckets": label the start
                    ax.text(t + 1.0, y, label, ha="left", va="center", fontsize=7.5, color="white")
                elif e["dur"] / 1e3 > 1.2:
                    ax.text(t + e["dur"] / 2e3, y, label, ha="center", va="center", fontsize=7.5,
                            color="white" if colour != "#bbbbbb" else "#333")  # fmt: skip
            elif e["name"] == "grad ready":
                ax.plot([t, t], [y - 0.3, y + 0.3], color="#2a9d8f", lw=1)
            elif e["name"] == "bucket launch":
                ax.plot(t, y_of[(e["pid"], "comm")] - 0.42, marker="v", color="#e07a1f", ms=5)
        ax.set_yticks(
            range(len(rows)),
            [f"rank {r}: {LANE_LABELS[lane]}" for r, lane in rows],
        )  # fmt: skip
        ax.set_ylim(len(rows) - 0.4, -0.6)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(
            ("overlap on (DDP): each bucket is all-reduced as soon as its gradients are ready"
             if overlap else
             "overlap off: every bucket waits for the end of backward (lesson 10's schedule)")
            + f" — median step {median_ms:.0f} ms",
            fontsize=10.5, loc="left",
        )  # fmt: skip
    axes[-1].set_xlabel(
        "ms since the forward started (one traced step after the bucket rebuild; "
        "▼ = bucket launched; grey = backward waiting for the last all-reduces)"
    )
    gain = compare(times[False], times[True], "overlap off", "overlap on")  # rank 0
    why = (
        f"Why the gain is small here ({machine()}): the ranks, their comm threads and gloo's "
        "memory copies share the cores that run backward; on GPUs the all-reduce runs on the "
        "network and copy engines, beside the compute."
    )
    fig.suptitle(
        f"minidp.DistributedDataParallel on 2 rank processes (gloo), 4.4M parameters, "
        f"bucket_cap_mb={cap:g}: buckets b0, b1, ... overlap the backward\n"
        + textwrap.fill(gain.sentence(), 150)
        + "\n"
        + textwrap.fill(why, 150),
        fontsize=9.5,
    )
    return save_figure(fig, out / "ddp_timeline.png", rect=(0, 0, 1, 0.91))
