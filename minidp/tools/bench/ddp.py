"""Benchmark: minidp DDP vs torch DDP per training step, and step time vs bucket size.

    python -m minidp bench ddp                          # default: about a minute, 2 ranks
    python -m minidp bench ddp --rounds 5 --steps 20    # steadier numbers
    python -m minidp bench ddp --quick                  # a few seconds, small model

Rows, each rank forward + cross-entropy + backward + SGD on an MLP of ~8.4 M parameters
(``--batch`` samples per rank, gloo): **torch DDP** (25 MiB buckets); **minidp DDP** (the
same buckets, all-reduced during backward); **no overlap** (launched after backward);
**naive** (the parameter server's all-reduce); **single process** (no communication: the
floor); then the DDP paper's sweep, step time against ``bucket_cap_mb`` for both. Rows take
turns step by step and the median is reported; one intra-op thread per rank, as torchrun
sets. The ranks share one machine's cores, so compute and communication compete: overlap
gains less than on separate machines. Read the ratios, not the absolute times.

Not a test (numbers depend on the machine); ``pytest tests/test_ddp_misc.py -k bench``
only checks that ``--quick`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch import nn

import minidp
from minidp.launch import ProcessWorld
from minidp.tools.bench.abba import train_step
from minidp.tools.bench.args import float_list, nonnegative_int, positive_int, world_size
from minidp.tools.bench.verdict import compare, interleave
from minidp.tools.recorder import mlp

SWEEP_CAPS = (1, 4, 10, 25, 100)


def make_model(w: int) -> nn.Module:
    """w -> 2w -> 2w -> w -> 10, ReLU between (w 1024: 8.4 M parameters)."""
    return mlp(w, 2 * w, 2 * w, w, 10)


def _wrap(kind: str, model: nn.Module, cap):
    if kind == "torch":
        return nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap)
    if kind == "single":
        return model
    options = {"no overlap": {"overlap": False}, "naive": {"algorithm": "naive"}}
    return minidp.DistributedDataParallel(model, bucket_cap_mb=cap, **options.get(kind, {}))


def _time_rows(rank, rows, x, y, steps, warmup, rounds) -> dict:
    """Step the ``rows`` [(name, net)] in turn, one step each (``verdict.interleave``: a
    moment's load elsewhere slows every row alike); per row, the step seconds. The warm-up
    includes the first iteration and the bucket rebuild."""
    fns = {name: train_step(net, torch.optim.SGD(net.parameters(), lr=1e-3), x, y)
           for name, net in rows}  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds):
        for name, t in interleave(fns, steps, warmup if r == 0 else 0).items():
            times[name] += t
        if rank == 0:
            done = ", ".join(
                f"{n} {statistics.median(t) * 1e3:.0f}" for n, t in list(times.items())[:5]
            )
            print(f"  [round {r + 1}/{rounds}] median ms so far: {done}, ...", flush=True)
    return times


def _rank_main(rank, world, args) -> dict:
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    kinds = ["torch", "minidp", "no overlap", "naive", "single"]
    rows = [(k, _wrap(k, make_model(args.width), None)) for k in kinds]
    for cap in args.caps:  # the sweep takes turns with the main rows: same conditions
        rows += [
            (f"{k} {cap} MiB", _wrap(k, make_model(args.width), cap)) for k in ("torch", "minidp")
        ]
    times = _time_rows(rank, rows, x, y, args.steps, args.warmup, args.rounds)
    nets = dict(rows)
    buckets = {cap: len(nets[f"minidp {cap} MiB"].reducer.buckets) for cap in args.caps}
    buckets["minidp"] = [len(b.params) for b in nets["minidp"].reducer.buckets]
    return {"times": times, "buckets": buckets}


def _median_ms(per_rank: list[dict], pick) -> float:
    """The slowest rank's median (a step is only done when every rank is)."""
    return max(statistics.median(pick(r)) for r in per_rank) * 1e3


def _vs(results: list[dict], a: str, b: str) -> str:
    """``b``'s step time over ``a``'s: the median of the per-step ratios (the rows take
    turns, so each step of ``b`` has its ``a`` step beside it; each step counted at its
    slowest rank), and in brackets their middle half (``minidp.tools.bench.verdict``)."""

    def slowest(key: str) -> list[float]:
        return [max(ts) for ts in zip(*(r["times"][key] for r in results))]

    c = compare(slowest(a), slowest(b), a, b)
    return f"{c.ratio:.2f}x ({c.low:.2f}-{c.high:.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minidp bench ddp", description=__doc__.split("\n")[0])
    parser.add_argument("--world-size", type=world_size, default=2)
    parser.add_argument("--width", type=positive_int, default=1024, help="MLP width (8.4M params)")
    parser.add_argument("--batch", type=positive_int, default=64, help="samples per rank/step")
    parser.add_argument("--steps", type=positive_int, default=8, help="timed steps/row/round")
    parser.add_argument("--warmup", type=nonnegative_int, default=2, help="untimed steps per row")
    parser.add_argument(
        "--rounds", type=positive_int, default=3, help="rounds (progress after each)"
    )
    parser.add_argument(
        "--caps", type=float_list, default=list(SWEEP_CAPS), help="bucket caps, MiB, comma list"
    )
    parser.add_argument("--threads", type=positive_int, default=1, help="intra-op threads/rank")
    parser.add_argument("--quick", action="store_true", help="tiny model, 1 round: smoke run")
    args = parser.parse_args(argv)
    args.caps = [int(c) if c == int(c) else c for c in args.caps]  # 25, not 25.0, in tables
    if args.quick:
        args.width, args.steps, args.rounds = 128, 2, 1
        args.warmup, args.caps = 1, args.caps[:2]
    model = make_model(args.width)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"bench ddp: {args.world_size} ranks (processes, gloo), MLP {n_params / 1e6:.1f} M "
        f"params ({n_params * 4 / 2**20:.1f} MiB of fp32 gradients), batch {args.batch} per "
        f"rank, median of {args.steps * args.rounds} steps per row (rows take turns), "
        f"{args.threads} intra-op thread(s) per rank, torch {torch.__version__}",
        flush=True,
    )
    t0 = time.perf_counter()
    with ProcessWorld(args.world_size, timeout=300) as world:
        results = world.run(_rank_main, args)
    report(results, args)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    return 0


def report(results: list[dict], args) -> None:
    names = {
        "torch": "torch DDP (gloo)",
        "minidp": "minidp DDP (ring, overlap)",
        "no overlap": "minidp DDP, no overlap",
        "naive": "minidp DDP, naive all-reduce",
        "single": "single process, no comm",
    }
    ms = {k: _median_ms(results, lambda r, k=k: r["times"][k]) for k in names}
    print(f"\n{'row':<30} {'step ms':>9} {'vs torch DDP (middle half)':>27} {'vs single':>10}")
    print("-" * 79)
    for k, name in names.items():
        print(
            f"{name:<30} {ms[k]:>9.1f} {_vs(results, 'torch', k):>27} {ms[k] / ms['single']:>9.2f}x"
        )
    gain = ms["no overlap"] - ms["minidp"]
    print(
        f"overlap saves {gain:.1f} ms per step ({gain / ms['no overlap']:+.0%} of the "
        f"no-overlap step); buckets (parameters each): {results[0]['buckets']['minidp']}"
    )
    print(
        f"\n{'bucket_cap_mb':>13} {'buckets':>8} {'torch ms':>9} {'minidp ms':>10} "
        f"{'ratio (middle half)':>20}"
    )
    print("-" * 64)
    for cap in args.caps:
        t = _median_ms(results, lambda r, c=cap: r["times"][f"torch {c} MiB"])
        m = _median_ms(results, lambda r, c=cap: r["times"][f"minidp {c} MiB"])
        n = results[0]["buckets"][cap]
        ratio = _vs(results, f"torch {cap} MiB", f"minidp {cap} MiB")
        print(f"{cap:>13} {n:>8} {t:>9.1f} {m:>10.1f} {ratio:>20}")


if __name__ == "__main__":
    sys.exit(main())
