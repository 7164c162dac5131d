"""Benchmark: how step time and bytes moved grow with model size — DDP, ZeRO-1/2, FSDP.

    python -m minidp bench scaling --out diagrams/scaling.png    # 1-64 M params: ~4 min
    python -m minidp bench scaling --sizes 1,4,16 --out s.png     # up to 16 M: ~1 min
    python -m minidp bench scaling --quick --out /tmp/scaling.png # seconds: a smoke run

Per model size (``bench ddp``'s MLP at the width that gives it) and row, on
``--world-size`` rank processes: a fresh model and AdamW, ``--warmup`` untimed steps, then
``--steps`` timed ones after a barrier at the slowest rank; the median is the row's time.
Rows (``bench zero``'s ``build``): minidp's DDP, ZeRO-1, ZeRO-2, FSDP and torch's DDP, DDP +
``ZeroRedundancyOptimizer``, FSDP2 without and with resharding (torch >= 2.8); one at a
time, freed after it. A growth curve, not a verdict (``bench zero`` / ``fsdp`` give those).
Bytes per rank per step: minidp's counted (DDP and ZeRO-1 through ``step_traffic``'s flat
ring: DDP's buckets less their headers), torch's from theory, marked so. A table, and a
two-panel PNG.

Test: ``pytest tests/test_bench_sharded.py -k scaling``
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time

import torch
from torch import nn

from minidp.comm import count_traffic
from minidp.launch import ProcessWorld
from minidp.tools.bench import abba
from minidp.tools.bench.args import nonnegative_int, positive_int, world_size
from minidp.tools.bench.ddp import make_model
from minidp.tools.bench.zero import LR, build, no_fsdp2
from minidp.tools.planner import stages

# row -> (family for the plot, minidp stage or None for torch, theory: bytes per rank / Ψ·4)
ROWS = {
    "minidp ddp": ("DDP", "ddp", None),
    "minidp zero1": ("ZeRO-1", "zero1", None),
    "minidp zero2": ("ZeRO-2", "zero2", None),
    "minidp fsdp": ("FSDP", "fsdp", None),
    "torch ddp": ("DDP", None, lambda w: 2 * (w - 1) / w),  # ring all-reduce
    "torch zero1": ("ZeRO-1", None, lambda w: 3 * (w - 1) / w),  # + broadcast of params
    "torch fsdp2 no reshard": ("ZeRO-2", None, lambda w: 2 * (w - 1) / w),  # RS + AG
    "torch fsdp2": ("FSDP", None, lambda w: 3 * (w - 1) / w),  # AG twice + RS
}
COLORS = {"DDP": "tab:blue", "ZeRO-1": "tab:orange", "ZeRO-2": "tab:green", "FSDP": "tab:red"}


def width_for(millions: float) -> int:
    """The MLP width whose 8w² + 15w + 10 parameters come nearest ``millions`` M."""
    n = millions * 1e6
    return max(4, round((-15 + math.sqrt(225 + 32 * (n - 10))) / 16))


def _sent(name: str, net, step, width: int, x, y) -> int:
    """Bytes this rank sends in one step, counted (minidp rows; one extra step)."""
    stage = ROWS[name][1]
    if stage in ("fsdp", "zero2"):  # counted as sent, comm thread included
        with count_traffic() as t:
            step()
        return t.sent_bytes
    # DDP and ZeRO-1: the flat ring all-reduce's bytes (DDP's buckets less their headers)
    loss = nn.functional.cross_entropy
    return stages.step_traffic(stage, make_model(width), x, y, loss, torch.optim.AdamW, lr=LR)


def _rank_main(rank: int, world: int, args) -> list[dict]:
    torch.set_num_threads(args.threads)
    rows = [r for r in ROWS if args.fsdp2 or not r.startswith("torch fsdp2")]
    table = []
    for millions in args.sizes:
        width = width_for(millions)
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(args.batch, width, generator=g)
        y = torch.randint(0, 10, (args.batch,), generator=g)
        for name in rows:
            t0 = time.perf_counter()
            net, opt = build(name, width, world)
            step = abba.train_step(net, opt, x, y)
            for _ in range(args.warmup):
                step()
            times = []
            for _ in range(args.steps):
                torch.distributed.barrier()
                t = time.perf_counter()
                step()
                times.append(time.perf_counter() - t)
            ms = statistics.median(abba.slowest_rank(times)) * 1e3
            params = sum(p.numel() for p in make_model(width).parameters())
            theory = ROWS[name][2]
            sent = _sent(name, net, step, width, x, y) if theory is None else None
            row = {"params": params, "row": name, "ms": ms, "sent": sent}
            if theory is not None:
                row["theory"] = theory(world) * 4 * params
            table.append(row)
            del net, opt, step
            gc.collect()  # one model in memory at a time
            if rank == 0:
                mb = (sent if sent is not None else row["theory"]) / 1e6
                how = "counted" if sent is not None else "theory"
                print(
                    f"  [{params / 1e6:6.2f} M] {name:<24} {ms:9.1f} ms/step  {mb:9.2f} MB "
                    f"sent ({how}), {time.perf_counter() - t0:.0f} s",
                    flush=True,
                )
    return table


def print_table(table: list[dict]) -> None:
    print(f"\n{'params':>9}  {'row':<24} {'step ms':>9}  {'MB sent/rank/step':>18}")
    print("-" * 66)
    for r in table:
        counted = r["sent"] is not None
        mb = (r["sent"] if counted else r["theory"]) / 1e6
        how = "counted" if counted else "theory"
        print(f"{r['params'] / 1e6:>7.2f} M  {r['row']:<24} {r['ms']:>9.1f}  {mb:>10.2f} {how}")


def plot(table: list[dict], out: str, world: int) -> None:
    """Two panels, log-log: step time and bytes per rank against parameters."""
    from minidp.tools.diagrams.common import pyplot, save_figure

    fig, (left, right) = pyplot().subplots(1, 2, figsize=(12, 4.8))
    for name, (family, stage, _) in ROWS.items():
        rows = [r for r in table if r["row"] == name]
        if not rows:
            continue
        mine = stage is not None
        style = {"color": COLORS[family], "ls": "-" if mine else "--"}
        style["marker"] = "o" if mine else "s"
        xs = [r["params"] for r in rows]
        left.plot(xs, [r["ms"] for r in rows], label=name, **style)
        sent = [(r["sent"] if mine else r["theory"]) / 1e6 for r in rows]
        right.plot(xs, sent, label=name + ("" if mine else " (theory)"), **style)
    left.set(ylabel="step time, ms (median, slowest rank)", title="step time")
    right.set(ylabel="MB sent per rank per step", title="bytes moved per rank")
    for ax in (left, right):
        ax.set(xscale="log", yscale="log", xlabel="model parameters")
        ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    right.text(  # lines that coincide are not missing: the bytes follow the collectives
        0.98,
        0.02,
        "stages that run the same collectives send the same bytes:\nlines on top of "
        "each other (at 2 ranks ZeRO-1 and FSDP too)",
        transform=right.transAxes,
        ha="right",
        va="bottom",
        fontsize=7,
    )
    fig.suptitle(
        f"{world} ranks (processes, gloo, CPU), AdamW, MLP; torch {torch.__version__}; "
        "minidp solid, torch dashed",
        fontsize=10,
    )
    save_figure(fig, out)


def _sizes(text: str) -> list[float]:
    try:
        sizes = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        sizes = []
    if not sizes or not all(math.isfinite(s) and s > 0 for s in sizes):
        raise argparse.ArgumentTypeError(
            f"expected positive millions of parameters, comma-separated (e.g. 1,4,16), got {text!r}"
        )
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="minidp bench scaling", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=[1.0, 4.0, 16.0, 64.0], help="M params (1,4,16,64)"
    )
    parser.add_argument("--world-size", type=world_size, default=2)
    parser.add_argument("--batch", type=positive_int, default=64, help="samples per rank/step")
    parser.add_argument("--steps", type=positive_int, default=3, help="timed steps per row (3)")
    parser.add_argument("--warmup", type=nonnegative_int, default=1, help="untimed steps per row")
    parser.add_argument("--threads", type=positive_int, default=1, help="intra-op threads/rank")
    parser.add_argument("--out", default="scaling.png", help="where the PNG goes")
    parser.add_argument("--quick", action="store_true", help="two tiny sizes, 1 step: smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.steps, args.warmup = [0.01, 0.04], 1, 1
    args.fsdp2 = no_fsdp2() is None
    print(
        f"bench scaling: {args.world_size} ranks (processes, gloo), sizes {args.sizes} M params, "
        f"AdamW, batch {args.batch} per rank, median of {args.steps} steps per row; torch "
        f"{torch.__version__}" + ("" if args.fsdp2 else f"; FSDP2 rows skipped: {no_fsdp2()}"),
        flush=True,
    )
    t0 = time.perf_counter()
    with ProcessWorld(args.world_size, timeout=600) as world:
        table = world.run(_rank_main, args)[0]
    print_table(table)
    try:
        plot(table, args.out, args.world_size)
    except ImportError:
        print(
            "bench scaling: the plot needs matplotlib (pip install 'minidp[plots]'); "
            "the table above is complete",
            file=sys.stderr,
        )
        return 1
    print(f"\nwrote {args.out} (total {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
