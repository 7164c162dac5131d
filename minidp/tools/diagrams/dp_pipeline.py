"""``dp_pipeline.png``: one ``minidp.DataParallel`` step, stage by stage, per device.

Recorded by ``minidp.tools.recorder.dp`` (what ``demo dp`` prints): scatter, replicate,
parallel_apply, gather and backward on 4 simulated devices, each stage on the device that
does it; below, the bytes each stage moves, from the tensors' sizes: the main device
carries (n-1)x what any other device does.

    python -m minidp diagrams --only dp

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from minidp.tools.diagrams.common import pyplot, save_figure
from minidp.tools.recorder import mlp
from minidp.tools.recorder.dp import dp_events

MAIN = ("scatter", "replicate", "gather", "sum grads")  # the main device's work: its row only


def traced_dp_step(n: int = 4, width: int = 512, depth: int = 4, batch: int = 1024):
    """One recorded DataParallel step on ``n`` simulated devices: (its stages as spans on the
    device that does the work, from the step's start; bytes per stage and device crossing
    to or from the main device, from the rows each got; the parameters' bytes)."""
    model = mlp(32, *(width,) * depth, 10, act=nn.Tanh)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    events = dp_events(model, x, y, ["cpu"] * n, loss_fn=nn.functional.cross_entropy)
    t0 = min(e["ts"] for e in events)
    name = {"parallel_apply": "forward"}  # each replica's forward, on its device's thread
    spans = [{**e, "name": name.get(e["args"]["stage"], e["args"]["stage"]), "ts": e["ts"] - t0}
             for e in events if e["pid"] == 0 or e["args"]["stage"] not in MAIN]  # fmt: skip
    rows = [a["rows"][1] - a["rows"][0] + 1 for a in (e["args"] for e in events)
            if a["stage"] == "scatter"]  # fmt: skip
    p_bytes = sum(p.nbytes for p in model.parameters())  # global: DP shards nothing
    moved = {"scatter": [r * 32 * 4 for r in rows], "replicate": [p_bytes] * n,
             "gather": [r * 10 * 4 for r in rows], "backward": [r * 10 * 4 for r in rows],
             "sum grads": [p_bytes] * n}  # fmt: skip
    return spans, {k: [0] + v[1:] for k, v in moved.items()}, p_bytes


STAGE_COLOURS = {  # one colour per stage, none repeated
    "scatter": "#e6ab02",
    "replicate": "#c44e52",
    "forward": "#3a6ea5",
    "gather": "#8172b2",
    "backward": "#2a9d8f",
    "sum grads": "#d95f02",
}


def draw(out: Path, quick: bool = False) -> Path:
    """One traced DataParallel step: who works when, and what crosses to/from the main device
    (one step whatever ``quick`` says)."""
    plt = pyplot()
    n = 4
    events, moved, p_bytes = traced_dp_step(n)
    fig, (a, b) = plt.subplots(2, 1, figsize=(12, 7.2), gridspec_kw={"height_ratios": [1.15, 1]})
    total = max(x["ts"] + x["dur"] for x in events) / 1e3
    small = 0
    for e in sorted(events, key=lambda e: e["ts"]):
        colour = STAGE_COLOURS.get(e["name"], "#999")
        start, dur = e["ts"] / 1e3, e["dur"] / 1e3
        # a stage shorter than 1% of the step still gets a visible sliver (its label says how long)
        a.barh(e["pid"], max(dur, total * 0.01), left=start, height=0.6, color=colour)
        if dur > 0.06 * total:
            a.text(start + dur / 2, e["pid"], e["name"], ha="center", va="center",
                   fontsize=8, color="white", weight="bold")  # fmt: skip
        else:  # too narrow to hold its name: label it above the main device's row
            a.annotate(
                f"{e['name']} {dur:.1f} ms", xy=(start + dur / 2, e["pid"] - 0.3),
                xytext=(start + dur / 2, -0.75 - 0.28 * (small % 2)), fontsize=7.5, ha="center",
                arrowprops={"arrowstyle": "-", "color": "#888", "lw": 0.6},
            )  # fmt: skip
            small += 1
    a.set_ylim(n - 0.5, -1.25)
    a.set_yticks(range(n), [f"device {i}" + (" (main)" if i == 0 else "") for i in range(n)])
    a.set_xlabel(
        "ms since the step started   (on CPU one autograd thread runs every replica's backward, "
        "interleaved)"
    )
    a.set_title(
        "One minidp.DataParallel step on 4 simulated devices (threads), traced: the main device "
        "works before, between and after the others",
        fontsize=10.5,
    )
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in STAGE_COLOURS.values()]
    a.legend(handles, list(STAGE_COLOURS), fontsize=8, ncol=8, loc="upper center",
             bbox_to_anchor=(0.5, -0.16), frameon=False)  # fmt: skip
    a.grid(axis="x", alpha=0.3)

    stages = list(moved)
    width = 0.8 / n
    for i in range(n):
        vals = [moved[s][i] / 1024 for s in stages]
        main_vals = [sum(moved[s]) / 1024 for s in stages]
        xs = [k + (i - (n - 1) / 2) * width for k in range(len(stages))]
        if i == 0:
            bars = b.bar(
                xs, main_vals, width, color="#c44e52", label="main device: all the traffic"
            )
            for bar, k in zip(bars, stages):
                ratio = sum(moved[k]) / max(max(moved[k][1:]), 1)
                b.text(bar.get_x() + width / 2, bar.get_height() * 1.15, f"{ratio:.0f}x",
                       ha="center", fontsize=8, color="#c44e52", weight="bold")  # fmt: skip
        else:
            b.bar(xs, vals, width, color=["#7f9cbf", "#9bb3cf", "#b8c9de"][(i - 1) % 3],
                  label=f"device {i}")  # fmt: skip
    b.set_xticks(range(len(stages)), [
        "scatter\n(inputs out)", "replicate\n(params out)", "gather\n(outputs in)",
        "backward\n(output grads out)", "sum grads\n(param grads in)",
    ])  # fmt: skip
    b.set_ylabel("KiB per step")
    b.set_yscale("log")
    b.set_ylim(top=max(sum(v) for v in moved.values()) / 1024 * 4)
    b.set_title(
        f"Bytes crossing device boundaries, measured from the tensors (parameters: "
        f"{p_bytes / 1024:.0f} KiB): the main device moves (n-1)x what any other device does",
        fontsize=10.5,
    )
    b.legend(fontsize=8.5)
    b.grid(axis="y", alpha=0.3)
    return save_figure(fig, out / "dp_pipeline.png")
