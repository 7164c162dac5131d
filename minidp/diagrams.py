"""Regenerate the pictures in ``diagrams/`` from real, traced runs.

    python -m minidp diagrams                    # all pictures into diagrams/
    python -m minidp diagrams --out /tmp/pics    # somewhere else
    python -m minidp diagrams --only ring traffic

Every picture is drawn from something that actually ran on this machine — nothing is
typed in by hand:

* ``ring_steps.png``: minidp's ring all-reduce on 4 thread-ranks, replayed from the
  messages a tapped group logged (the same run as ``python -m minidp demo ring``);
* ``traffic.png``: bytes per rank, parameter server vs ring, as the world grows
  (``minidp.comm.count_traffic``, minus the header check measured on its own);
* ``dp_pipeline.png``: one ``minidp.DataParallel`` step, stage by stage, per simulated
  device (trace spans and the DP memory report);
* ``ddp_timeline.png``: one ``minidp.DistributedDataParallel`` step on 2 rank processes:
  backward, gradient-ready hooks, bucket all-reduces overlapping the backward;
* ``bucket_sweep.png``: DDP step time against ``bucket_cap_mb``.

Needs matplotlib (``pip install matplotlib``); drawn with the Agg backend, no display.
Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

# Colours shared by every picture, so a legend learnt once reads everywhere.
ARRIVED = "#ffd166"  # arrived this step (partial sum)
FINAL = "#8fd694"  # holds the final sum
IDLE = "#eef1f5"
RS_ARROW = "#e07a1f"  # reduce-scatter messages
AG_ARROW = "#3a6ea5"  # all-gather messages
RANK_COLOURS = ["#3a6ea5", "#e07a1f", "#2a9d8f", "#c44e52", "#8172b2", "#937860"]


QUICK = False  # --quick: fewer steps and settings (tests); the committed pictures use full runs


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, rect=(0, 0, 1, 1)) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- ring steps


def ring_steps(out: Path) -> Path:
    """A rank x chunk grid per step of a real 4-rank ring all-reduce."""
    from minidp.demo import ring

    plt = _plt()
    world, numel = 4, 4
    run = ring.record_ring(world, numel)
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
                    edge, lw = (RS_ARROW if step.phase == ring.REDUCE_SCATTER else AG_ARROW), 2.4
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
            colour = RS_ARROW if step.phase == ring.REDUCE_SCATTER else AG_ARROW
            for m in step.moves:
                x = m.chunk * (cw + gap) + gap * 0.5
                y0, y1 = m.src * ch + ch / 2, m.dst * ch + ch / 2
                ax.annotate(
                    "", xy=(x, y1), xytext=(x, y0),
                    arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 1.6,
                                "shrinkA": 2, "shrinkB": 2},
                )  # fmt: skip

    order = [0, 1, 2, 3, 4, 5, 6]
    for k, idx in enumerate(order):
        ax = axes[k // cols][k % cols]
        draw(ax, *panels[idx])
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
    legend_ax.annotate("", xy=(0.12, 0.54), xytext=(0.02, 0.54),
                       arrowprops={"arrowstyle": "-|>", "color": RS_ARROW, "lw": 1.6})  # fmt: skip
    legend_ax.text(0.16, 0.54, "reduce-scatter: receiver adds its piece", va="center", fontsize=9)
    legend_ax.annotate("", xy=(0.12, 0.45), xytext=(0.02, 0.45),
                       arrowprops={"arrowstyle": "-|>", "color": AG_ARROW, "lw": 1.6})  # fmt: skip
    legend_ax.text(0.16, 0.45, "all-gather: receiver keeps a copy", va="center", fontsize=9)
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
        "Ring all-reduce on 4 real ranks (minidp.comm.ring_all_reduce, textbook layout): "
        "reduce-scatter, then all-gather",
        fontsize=12.5,
    )
    return _save(fig, out / "ring_steps.png", rect=(0, 0, 1, 0.96))


# ----------------------------------------------------------------------------- traffic


def _traffic_rank(rank: int, world: int, numel: int) -> dict:
    from minidp import comm

    out = {}
    for name, fn in (("ring", comm.ring_all_reduce), ("server", comm.naive_all_reduce)):
        x = torch.ones(numel)
        with comm.count_traffic() as t:
            fn(x)
        with comm.count_traffic() as header:  # the header check alone, to subtract
            comm.barrier()
        out[name] = t.sent_bytes - header.sent_bytes
    return out


def traffic(out: Path) -> Path:
    """Bytes sent per rank (and in total) as the world grows: server vs ring."""
    from minidp.launch import run_threads

    plt = _plt()
    numel = 256 * 1024  # S = 1 MiB of float32
    s = numel * 4
    worlds = [2, 4, 8] if QUICK else [2, 3, 4, 6, 8, 12, 16]
    server0, server_other, ring_max, totals = [], [], [], {"ring": [], "server": []}
    for n in worlds:
        res = run_threads(_traffic_rank, n, numel, timeout=120.0)
        server0.append(res[0]["server"] / s)
        server_other.append(max(r["server"] for r in res[1:]) / s)
        ring_max.append(max(r["ring"] for r in res) / s)
        for k in totals:
            totals[k].append(sum(r[k] for r in res) / s)

    fig, (a, b) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    a.plot(worlds, server0, "o-", color="#c44e52", label="parameter server: rank 0 (the server)")
    a.plot(worlds, server_other, "s-", color="#e8a0a2", label="parameter server: any other rank")
    a.plot(worlds, ring_max, "o-", color=AG_ARROW, label="ring: every rank")
    a.plot(worlds, [n - 1 for n in worlds], ":", color="#777", lw=1, label="(n-1)·S")
    a.plot(worlds, [2 * (n - 1) / n for n in worlds], "--", color="#777", lw=1, label="2(n-1)/n·S")
    a.set_xlabel("ranks n")
    a.set_ylabel("bytes one rank sends (and receives), in units of S")
    a.set_title("The busiest link: the server's grows with n,\nthe ring's levels off below 2·S")
    a.legend(fontsize=8.5)
    a.grid(alpha=0.3)
    b.plot(worlds, totals["server"], "o-", color="#c44e52", label="parameter server")
    b.plot(worlds, totals["ring"], "x--", color=AG_ARROW, label="ring", ms=9)
    b.set_xlabel("ranks n")
    b.set_ylabel("bytes sent by all ranks together, in units of S")
    b.set_title("Total traffic is the same, 2(n-1)·S:\nthe ring spreads it evenly over the links")
    b.legend(fontsize=9)
    b.grid(alpha=0.3)
    fig.suptitle(
        f"All-reduce of S = {s // 2**20} MiB, measured with minidp.comm.count_traffic "
        "(ranks as threads, real gloo send/recv)",
        fontsize=11,
    )
    return _save(fig, out / "traffic.png", rect=(0, 0, 1, 0.94))


# ----------------------------------------------------------------------------- DP pipeline


def _mlp(width: int, depth: int, seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    sizes = [32] + [width] * depth
    for a, b in zip(sizes, sizes[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def traced_dp_step(n: int = 4, width: int = 512, depth: int = 4, batch: int = 1024):
    """One DataParallel step through minidp.dp's four functions, each stage traced on the
    device (track) that does it; returns (events, bytes moved per stage and device)."""
    from torch import nn

    from minidp import trace
    from minidp.dp import gather, parallel_apply, replicate, scatter

    devices = ["cpu"] * n
    model = _mlp(width, depth)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    p_bytes = sum(_nbytes(p) for p in model.parameters())
    moved: dict[str, list[int]] = {}
    with trace.recording() as rec:
        with trace.span("scatter", rank=0):
            chunks = scatter(x, devices)
        moved["scatter"] = [0] + [_nbytes(c) for c in chunks[1:]]
        with trace.span("replicate", rank=0):
            replicas = replicate(model, devices)
        moved["replicate"] = [0] + [p_bytes] * (n - 1)

        def timed(i: int):
            def run(xc):
                with trace.span("forward", rank=i):
                    return replicas[i](xc)

            return run

        outs = parallel_apply([timed(i) for i in range(n)], [(c,) for c in chunks], devices=devices)
        moved["gather"] = [0] + [_nbytes(o) for o in outs[1:]]
        with trace.span("gather", rank=0):
            out = gather(outs, "cpu")
        with trace.span("loss", rank=0):
            loss = nn.functional.cross_entropy(out, y)
        # Backward on CPU runs in one autograd thread: time each replica's share from the
        # gradient reaching its output to its last parameter gradient.
        first, last = {}, {}
        for i, o in enumerate(outs):
            o.register_hook(lambda grad, i=i: first.setdefault(i, trace.now_us()) and None)
            for m in replicas[i].modules():
                for key in ("weight", "bias"):
                    t = vars(m).get(key)
                    if isinstance(t, torch.Tensor) and t.requires_grad:
                        t.register_hook(lambda grad, i=i: last.__setitem__(i, trace.now_us()))
        done = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: done.append(trace.now_us()))
        loss.backward()
        for i in range(n):
            trace.complete("backward", first[i], last[i], lane="compute", rank=i)
        trace.complete("sum grads", max(last.values()), max(done), lane="compute", rank=0)
        moved["backward"] = [0] + [_nbytes(o) for o in outs[1:]]  # d loss/d out, per chunk
        moved["sum grads"] = [0] + [p_bytes] * (n - 1)
        with trace.span("optimizer step", rank=0):
            opt.step()
    events = [e for e in rec.events if e["ph"] == "X" and e["ts"] >= 0]
    t0 = min(e["ts"] for e in events)
    return [{**e, "ts": e["ts"] - t0} for e in events], moved, p_bytes


STAGE_COLOURS = {
    "scatter": "#8172b2",
    "replicate": "#c44e52",
    "forward": "#3a6ea5",
    "gather": "#8172b2",
    "loss": "#937860",
    "backward": "#2a9d8f",
    "sum grads": "#c44e52",
    "optimizer step": "#937860",
}


def dp_pipeline(out: Path) -> Path:
    """One traced DataParallel step: who works when, and what crosses to/from the main device."""
    plt = _plt()
    n = 4
    events, moved, p_bytes = traced_dp_step(n)
    fig, (a, b) = plt.subplots(2, 1, figsize=(12, 7.2), gridspec_kw={"height_ratios": [1.15, 1]})
    total = max(x["ts"] + x["dur"] for x in events) / 1e3
    small = 0
    for e in sorted(events, key=lambda e: e["ts"]):
        colour = STAGE_COLOURS.get(e["name"], "#999")
        start, dur = e["ts"] / 1e3, e["dur"] / 1e3
        a.barh(e["pid"], max(dur, total * 0.003), left=start, height=0.6, color=colour)
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
    return _save(fig, out / "dp_pipeline.png")


# ----------------------------------------------------------------------------- DDP


def _ddp_steps(ddp, data, record: int | None = None) -> tuple[list[float], list[dict]]:
    """Train on ``data``; return per-step times and the trace events of step ``record``."""
    import contextlib

    from torch import nn

    from minidp import trace

    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    times, events = [], []
    for i, (xb, yb) in enumerate(data):
        with trace.recording() if i == record else contextlib.nullcontext() as rec:
            t0 = time.perf_counter()
            opt.zero_grad()
            with trace.span("forward + loss", lane="compute"):
                loss = nn.functional.cross_entropy(ddp(xb), yb)
            with trace.span("backward", lane="compute"):
                loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
        if i == record:
            events = rec.events
    return times, events


def _rank_data(rank: int, steps: int, batch: int = 128):
    g = torch.Generator().manual_seed(10 + rank)
    return [
        (torch.randn(batch, 32, generator=g), torch.randint(0, 10, (batch,), generator=g))
        for _ in range(steps)
    ]


def _ddp_timeline_rank(rank: int, world: int, cap_mb: float, steps: int) -> dict:
    import statistics

    import minidp

    torch.set_num_threads(1)
    out = {}
    for overlap in (True, False):
        ddp = minidp.DistributedDataParallel(
            _mlp(1024, 5), bucket_cap_mb=cap_mb, overlap=overlap
        )  # 4.4M parameters
        times, events = _ddp_steps(ddp, _rank_data(rank, steps), record=3)  # after the rebuild
        out[overlap] = (events, statistics.median(times[2:]) * 1e3)
    return out


def ddp_timeline(out: Path) -> Path:
    """One traced DDP step on 2 ranks, overlap on and off: buckets vs backward."""
    from minidp.launch import spawn

    plt = _plt()
    cap = 2.0
    res = spawn(_ddp_timeline_rank, 2, cap, 6 if QUICK else 14)
    fig, axes = plt.subplots(2, 1, figsize=(12.5, 7.4), sharex=True)
    for ax, overlap in zip(axes, (True, False)):
        events = [e for r in res for e in r[overlap][0]]
        median_ms = res[0][overlap][1]
        # the long spans first, so the shorter ones drawn later stay visible on top
        events.sort(key=lambda e: -e.get("dur", 0))
        start = min(e["ts"] for e in events if e["name"] == "forward + loss")
        rows = []  # (rank, lane) -> y
        for rank in (0, 1):
            rows += [(rank, "compute"), (rank, "hooks"), (rank, "comm")]
        y_of = {key: i for i, key in enumerate(rows)}
        for e in events:
            lane = {"backward": "hooks"}.get(e["tid"], e["tid"])
            if e["name"] in ("wait for buckets",):
                lane = "compute"
            key = (e["pid"], lane)
            if key not in y_of or e["name"] in ("send", "recv", "forward"):
                continue
            y, t = y_of[key], (e["ts"] - start) / 1e3
            if e["ph"] == "X":
                name = e["name"]
                colour = {"forward + loss": "#3a6ea5", "backward": "#2a9d8f",
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
    fig.suptitle(
        f"minidp.DistributedDataParallel on 2 rank processes (gloo), 4.4M parameters, "
        f"bucket_cap_mb={cap:g}: buckets b0, b1, ... overlap the backward",
        fontsize=11.5,
    )
    return _save(fig, out / "ddp_timeline.png", rect=(0, 0, 1, 0.95))


LANE_LABELS = {"compute": "forward/backward", "hooks": "grad-ready hooks", "comm": "all-reduces"}
SWEEP_CAPS_MB = (0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 25.0)
SWEEP_MODEL = (256, 24)  # width, depth: 24 weights of 256 KiB, ~6.4 MB of gradients


def _sweep_rank(rank: int, world: int, caps: tuple, steps: int, rounds: int) -> dict:
    import statistics

    from torch import nn

    import minidp

    torch.set_num_threads(1)
    data = _rank_data(rank, steps + 3)
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
                ddp = wrapper(_mlp(*SWEEP_MODEL), bucket_cap_mb=cap, **kw)
                times, _ = _ddp_steps(ddp, data)
                ms = statistics.median(times[3:]) * 1e3
                n_buckets = len(ddp.reducer.assignment) if name == "minidp" else None
                old = best.get((name, cap))
                best[(name, cap)] = (min(ms, old[0]) if old else ms, n_buckets)
    return best


def bucket_sweep(out: Path) -> Path:
    """DDP step time against bucket_cap_mb, minidp and torch, on 2 rank processes."""
    from minidp.launch import spawn

    plt = _plt()
    caps = (SWEEP_CAPS_MB[0], SWEEP_CAPS_MB[-1]) if QUICK else SWEEP_CAPS_MB
    res = spawn(_sweep_rank, 2, caps, 3 if QUICK else 8, 1 if QUICK else 3)[0]
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
    return _save(fig, out / "bucket_sweep.png")


# ----------------------------------------------------------------------------- registry

DIAGRAMS: dict[str, tuple[Callable[[Path], Path], str | None, str]] = {
    # name: (function, package it needs or None, what it shows)
    "ring": (ring_steps, None, "ring all-reduce step grid (4 ranks)"),
    "traffic": (traffic, None, "parameter server vs ring bytes per rank, n = 2..16"),
    "dp": (dp_pipeline, "minidp.dp", "one traced DataParallel step, bytes per device"),
    "ddp": (ddp_timeline, "minidp.ddp", "one traced DDP step on 2 ranks, overlap on/off"),
    "sweep": (bucket_sweep, "minidp.ddp", "DDP step time vs bucket_cap_mb (2 ranks)"),
}


def _available(package: str | None) -> bool:
    return package is None or importlib.util.find_spec(package) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="minidp diagrams", description="Regenerate the pictures from real traced runs."
    )
    parser.add_argument("--out", default="diagrams", help="output folder (default diagrams/)")
    parser.add_argument(
        "--only", nargs="+", choices=sorted(DIAGRAMS), help="draw only these pictures"
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer steps and settings (for tests; noisier)"
    )
    args = parser.parse_args(argv)
    global QUICK
    QUICK = args.quick
    if importlib.util.find_spec("matplotlib") is None:
        print("minidp diagrams: needs matplotlib — pip install matplotlib", file=sys.stderr)
        return 2
    torch.set_num_threads(1)  # ranks and devices share 2 cores here; keep timings honest
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(DIAGRAMS)
    failed = 0
    for i, name in enumerate(names, 1):
        fn, package, what = DIAGRAMS[name]
        prefix = f"[{i}/{len(names)}] {name:<9}"
        if not _available(package):
            print(f"{prefix} skipped: needs {package}", flush=True)
            continue
        print(f"{prefix} {what} ...", end=" ", flush=True)
        t0 = time.perf_counter()
        path = fn(out)
        print(f"{path} ({time.perf_counter() - t0:.1f}s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
