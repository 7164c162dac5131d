"""Benchmark: minidp's all-reduces against gloo's own, same run, and what the check costs.

Run: ``python -m minidp bench allreduce`` (``--quick`` for a short run, ``--help``).

Per world size (processes, gloo) and size: gloo's ``all_reduce``; minidp's ``all_reduce``
("auto": one exchange up to 1 MiB at 2 ranks and 256 KiB from 3, the ring above); the ring
alone; the parameter server — taking turns repetition by repetition (:func:`time_in_turns`).
Reported: median time, ``algbw = bytes / time``, ``busbw = algbw · 2(n-1)/n`` (nccl-tests:
what each rank's link carries), and each time over gloo's as the median of per-repetition
ratios with their middle half (``verdict.py``): a spread that straddles a goal neither
meets nor misses it. The check (every collective's header): each repetition also times the
data pass alone (the direct exchange or the ring, no header); the "check" columns are the
per-repetition differences, in µs and as a share. ``--breakdown``: the passes' rows too.
Last, the README's goals (world size 2) get a verdict. Those time one call alone, after a
barrier; ``--loop CALLS`` also times calls in a loop, as training makes them: blocks of
CALLS calls, gloo's and minidp's in turn, ``--compute-us`` of busy work after each call
(random, half to 1.5 times it, so ranks drift apart as a step's compute makes them).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time

import torch
import torch.distributed as dist

import minidp
from minidp.comm import direct, ring
from minidp.comm import group as groups
from minidp.launch import ProcessWorld
from minidp.tools.bench.args import nonnegative_float, positive_float, positive_int, world_size
from minidp.tools.bench.verdict import MIN_PAIRS, compare

KIB = 1024
# the goals for "auto" against gloo at world size 2 (bytes -> most time vs gloo's)
GOALS = {16 * KIB: 1.6, 1 << 20: 1.3, 64 << 20: 1.1}
PASS = {"auto": "direct pass", "ring": "ring pass"}  # what each checked all-reduce runs


def fmt_bytes(n: int) -> str:
    """``4096`` -> ``"4 KiB"``: the sizes the benches measure are powers of two."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _direct_pass(t: torch.Tensor, g) -> None:
    """What ``all_reduce`` runs up to ``small_bytes``, without the header: the exchange of
    every rank's tensor (one message per peer, as with the header) and the reduction."""
    direct.direct_pass(t, g, "sum")


def time_in_turns(ops: dict, x: torch.Tensor, budget_s: float, max_reps: int) -> dict:
    """``{name: seconds per repetition}``: each op on a fresh copy of ``x``, in turn,
    repetition by repetition (background load hits all alike), each after a barrier and
    counted at the slowest rank; at least ``MIN_PAIRS`` repetitions, then until
    ``budget_s`` or ``max_reps``."""
    times: dict = {a: [] for a in ops}
    reps = 0
    # Stop on the summed slowest-rank times, which are the same number on every rank:
    # a rank's own clock could stop it one repetition early and desync the others.
    while reps < max_reps and (reps < MIN_PAIRS or sum(map(sum, times.values())) < budget_s):
        for algo, op in ops.items():
            t = x.clone()
            dist.barrier()
            t0 = time.perf_counter()
            op(t)
            dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the slowest rank sets the time
            times[algo].append(float(dt))
        reps += 1
    return times


def time_in_loops(ops: dict, x: torch.Tensor, calls: int, compute_s: float, blocks=4) -> dict:
    """``{name: seconds per call, block by block}``: ``blocks`` blocks of ``calls`` calls per
    op, the ops in turn, each call followed by ``compute_s`` (half to 1.5 times, at random)
    of busy work; each block counted at the slowest rank."""
    rng = random.Random(dist.get_rank())  # each rank its own compute times
    times: dict = {a: [] for a in ops}
    for _ in range(blocks):
        for algo, op in ops.items():
            t = torch.zeros_like(x)  # zeros: a sum that stays finite however many calls
            for _ in range(10):  # the first calls post receives, cut views: not the loop's
                op(t)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                op(t)
                end = time.perf_counter() + compute_s * (0.5 + rng.random())
                while time.perf_counter() < end:
                    pass
            dt = torch.tensor([(time.perf_counter() - t0) / calls], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            times[algo].append(float(dt))
    return times


def loop_table(results: dict, calls: int, compute_s: float) -> str:
    """Markdown: per (world, size), gloo's and ``all_reduce``'s time per call in a loop
    (median of the blocks), and the per-block ratios' range."""
    between = f"{compute_s * 1e6:.0f} µs of compute between calls" if compute_s else "back to back"
    lines = [
        f"in a loop: {calls} calls per block, {between} (µs per call and the work after it)",
        "| ranks | size | gloo µs | all_reduce µs | × gloo (blocks: least–most) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for world, per_size in results.items():
        for nbytes, times in per_size.items():
            ratios = sorted(a / g for a, g in zip(times["auto"], times["gloo"]))
            gloo, auto = (statistics.median(times[k]) * 1e6 for k in ("gloo", "auto"))
            lines.append(
                f"| {world} | {fmt_bytes(nbytes)} | {gloo:.0f} | {auto:.0f} | "
                f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}–{ratios[-1]:.2f}) |"
            )
    return "\n".join(lines)


def _loops(rank: int, world: int, sizes: list[int], calls: int, compute_s: float) -> dict:
    """Rank function: gloo's and minidp's all_reduce in loops, every size."""
    ops = {"gloo": lambda t: dist.all_reduce(t), "auto": lambda t: minidp.comm.all_reduce(t)}
    return {n: time_in_loops(ops, torch.empty(n // 4), calls, compute_s) for n in sizes}


def _measure(rank: int, world: int, sizes: list[int], budget_s: float, max_reps: int) -> dict:
    """Rank function: time every algorithm on every size; rank 0 reports progress."""
    results = {}
    g = groups.resolve()
    for nbytes in sizes:
        ops = {
            "gloo": lambda t: dist.all_reduce(t),
            "auto": lambda t: minidp.comm.all_reduce(t),
            "ring": lambda t: minidp.comm.ring_all_reduce(t),
            "naive": lambda t: minidp.comm.naive_all_reduce(t),
            "ring pass": lambda t: ring.gloo_ring(t, g, "sum"),
        }
        if nbytes <= direct.small_bytes(world):  # where "auto" runs the direct exchange
            ops["direct pass"] = lambda t: _direct_pass(t, g)
        times = results[nbytes] = time_in_turns(ops, torch.randn(nbytes // 4), budget_s, max_reps)
        if rank == 0:
            line = "  ".join(f"{a} {statistics.median(times[a]) * 1e3:7.2f} ms" for a in times)
            reps = len(times["gloo"])
            print(f"  [{world} ranks] {fmt_bytes(nbytes):>8}: {line}  ({reps} reps)",
                  file=sys.stderr, flush=True)  # fmt: skip
    return results


def check_cost(times: dict[str, list[float]], algo: str) -> tuple[str, str]:
    """The check's cost in one all-reduce, per-repetition ``algo`` minus its pass alone:
    ``"median µs (first to third quartile)"``, and the median's share of ``algo``'s time."""
    alone = times.get(PASS[algo]) or times["ring pass"]  # "auto" above small_bytes: the ring
    diffs = [(a - p) * 1e6 for a, p in zip(times[algo], alone)]  # µs
    low, mid, high = statistics.quantiles(diffs, n=4, method="inclusive")
    share = mid / 1e6 / statistics.median(times[algo])
    return f"{mid:+.0f} ({low:+.0f} to {high:+.0f})", f"{share:.0%}"


def table(results: dict[int, dict[int, dict[str, list[float]]]], breakdown: bool = False) -> str:
    """Markdown table: one row per (world, size, algorithm); times in seconds per repetition."""
    lines = [
        "| ranks | size | algorithm | median ms | algbw GB/s | busbw GB/s | time vs gloo "
        "(middle half) | check µs per call (middle half) | check share |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for world, per_size in results.items():
        for nbytes, times in per_size.items():
            for algo in times:
                if algo.endswith(" pass") and not breakdown:
                    continue
                t = statistics.median(times[algo])
                algbw = nbytes / t / 1e9
                busbw = algbw * 2 * (world - 1) / world
                c = compare(times["gloo"], times[algo], "gloo", algo)
                check = " | ".join(check_cost(times, algo)) if algo in PASS else "— | —"
                lines.append(
                    f"| {world} | {fmt_bytes(nbytes)} | {algo} | {t * 1e3:.2f} | {algbw:.2f} | "
                    f"{busbw:.2f} | {c.ratio:.2f}x ({c.low:.2f}–{c.high:.2f}) | {check} |"
                )
    return "\n".join(lines)


def goals(results: dict[int, dict[int, dict[str, list[float]]]]) -> list[str]:
    """A verdict per goal measured (world size 2, "auto" vs gloo): meets when the whole
    middle half of the ratios is at or under the goal, misses when it is all above."""
    lines = []
    for nbytes, goal in GOALS.items():
        times = results.get(2, {}).get(nbytes)
        if times is None:
            continue
        c = compare(times["gloo"], times["auto"], "gloo", "auto")
        if c.pairs < MIN_PAIRS:
            verdict = f"inconclusive (only {c.pairs} repetitions)"
        elif c.high <= goal:
            verdict = "meets it"
        elif c.low > goal:
            verdict = "misses it"
        else:
            verdict = "inconclusive on this machine (the middle half straddles the goal)"
        cost, share = check_cost(times, "auto")
        lines.append(
            f"  2 ranks, {fmt_bytes(nbytes):>6}: all_reduce {c.ratio:.2f}x gloo "
            f"({c.low:.2f}–{c.high:.2f}, {c.pairs} reps), goal <= {goal}x: {verdict}; "
            f"the check {cost} µs per call, {share} of the time"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="minidp bench allreduce",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--worlds", type=world_size, nargs="+", default=[2, 4], help="world sizes")
    p.add_argument("--min-size", type=positive_int, default=4 * KIB, help="smallest, bytes")
    p.add_argument("--max-size", type=positive_int, default=64 << 20, help="largest, bytes")
    p.add_argument("--budget", type=positive_float, default=1.5, help="seconds per size (1.5)")
    p.add_argument("--max-reps", type=positive_int, default=50, help="repetitions per size, most")
    p.add_argument("--quick", action="store_true", help="sizes 4 KiB..1 MiB, short budget")
    p.add_argument("--breakdown", action="store_true", help="also print the data passes' own rows")
    p.add_argument("--loop", type=positive_int, metavar="CALLS",
                   help="also time calls in a loop: blocks of CALLS calls")  # fmt: skip
    p.add_argument("--compute-us", type=nonnegative_float, default=0.0,
                   help="busy work after each call in --loop, µs (0: back to back)")  # fmt: skip
    args = p.parse_args(argv)
    if args.min_size > args.max_size:
        p.error(
            f"--min-size {args.min_size} is above --max-size {args.max_size}: expected "
            "min <= max (sizes grow 4x from the min up to the max)"
        )
    if args.quick:
        args.max_size, args.budget, args.max_reps = min(args.max_size, 1 << 20), 0.2, 5
    sizes = []
    n = args.min_size
    while n <= args.max_size:
        sizes.append(n)
        n *= 4
    load = os.getloadavg()[0]
    busy = " (other work shares the CPU: read the middle halves)" if load > 0.5 else ""
    print(
        f"all-reduce benchmark on {platform.machine()} with {os.cpu_count()} CPU cores, "
        f"torch {torch.__version__}, float32, gloo over loopback; sizes "
        f"{fmt_bytes(sizes[0])}..{fmt_bytes(sizes[-1])}, worlds {args.worlds}; load average "
        f"{load:.1f} before it starts{busy}",
        flush=True,
    )
    results, loops = {}, {}
    compute_s = args.compute_us / 1e6
    for world in args.worlds:
        print(f"starting {world} rank processes ...", file=sys.stderr, flush=True)
        with ProcessWorld(world, timeout=300) as w:
            results[world] = w.run(_measure, sizes, args.budget, args.max_reps)[0]
            if args.loop:
                print(f"  [{world} ranks] loops ...", file=sys.stderr, flush=True)
                loops[world] = w.run(_loops, sizes, args.loop, compute_s)[0]
    print()
    print(table(results, args.breakdown))
    if loops:
        print()
        print(loop_table(loops, args.loop, compute_s))
    verdicts = goals(results)
    if verdicts:
        print("\ngoals (README): all_reduce vs gloo, same run")
        print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
