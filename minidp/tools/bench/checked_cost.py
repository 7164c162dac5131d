"""What checked mode costs: one ring all-reduce with and without ``minidp.comm.checked()``.

Run: ``python -m minidp bench faults`` (its last table; ``--sizes``, ``--budget``, or
``--no-cost`` to skip it).

2 rank processes, several sizes; the two modes take turns repetition by repetition (so
background load hits both alike), each repetition starts after a barrier and counts the
slowest rank; reported: the median of each, and the extra microseconds per call that the
fingerprint adds (finding the call site, counting the sequence number: both travel in the
header every collective sends anyway, no message more).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.distributed as dist

import minidp
from minidp.comm import checked


def checked_cost(
    rank: int, world: int, sizes: list[int], budget_s: float, max_reps: int
) -> dict[int, tuple[float, float, int]]:
    """Rank function: {nbytes: (plain s, checked s, reps)}; rank 0 reports progress."""
    results = {}
    for nbytes in sizes:
        x = torch.randn(max(nbytes // 4, 1))
        times: dict[bool, list[float]] = {False: [], True: []}
        reps, spent = 0, 0.0  # spent: from the all-reduced times, so equal on every rank
        while reps < max_reps and (reps < 5 or spent < budget_s):
            for mode in (False, True):
                t = x.clone()
                dist.barrier()
                t0 = time.perf_counter()
                with checked(mode):
                    minidp.comm.ring_all_reduce(t)
                dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the slowest rank counts
                times[mode].append(float(dt))
                spent += float(dt)
            reps += 1
        plain, fingerprinted = (statistics.median(times[m]) for m in (False, True))
        results[nbytes] = (plain, fingerprinted, reps)
        if rank == 0:
            print(
                f"  checked mode, {_fmt_bytes(nbytes):>8}: plain {plain * 1e3:.3f} ms, "
                f"checked {fingerprinted * 1e3:.3f} ms ({reps} reps)",
                file=sys.stderr,
                flush=True,
            )
    return results


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def cost_table(results: dict[int, tuple[float, float, int]]) -> str:
    lines = [
        "| size | plain ms | checked ms | checked / plain | extra µs per call | reps |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for nbytes, (plain, fingerprinted, reps) in results.items():
        lines.append(
            f"| {_fmt_bytes(nbytes)} | {plain * 1e3:.3f} | {fingerprinted * 1e3:.3f} | "
            f"{fingerprinted / plain:.2f}x | {(fingerprinted - plain) * 1e6:+.0f} | {reps} |"
        )
    return "\n".join(lines)
