"""Benchmark: what checked mode (``MINIDP_DEBUG=DETAIL``) costs per all-reduce.

Run: ``python -m minidp bench checked`` (about 10 s on 2 cores; ``--sizes``, ``--budget``)

Every collective checks that all ranks called the same thing (kind, size, dtype, op): its
header rides in the first message it sends anyway. Checked mode adds a fingerprint of the
call site and a sequence number to that header, so swapped or skipped same-shaped calls are
refused too. This times one ring all-reduce with and without it, taking turns
(``allreduce.time_in_turns``), at 2 ranks: the extra µs per call are the fingerprint's work
(a stack walk for the calling line), not an extra message.

What it is for — faults and bad inputs ending in a clear error, timed, in fresh worlds:
``python tests/fault_catalog.py`` (and ``pytest -m slow tests/test_fault_catalog.py``).
"""

from __future__ import annotations

import argparse
import sys

import torch

import minidp
from minidp.comm import checked
from minidp.launch import ProcessWorld
from minidp.tools.bench.allreduce import fmt_bytes, time_in_turns
from minidp.tools.bench.args import positive_float, positive_int
from minidp.tools.bench.verdict import Comparison, compare


def checked_cost(rank: int, world: int, sizes: list[int], budget_s: float, max_reps: int) -> dict:
    """Rank function: {nbytes: Comparison of plain vs checked}; rank 0 reports progress."""
    results = {}
    for nbytes in sizes:
        ops = {}
        for mode in (False, True):

            def ring(t, mode=mode):
                with checked(mode):
                    minidp.comm.ring_all_reduce(t)

            ops[mode] = ring
        times = time_in_turns(ops, torch.randn(max(nbytes // 4, 1)), budget_s, max_reps)
        results[nbytes] = compare(times[False], times[True], "plain", "checked")
        if rank == 0:
            print(f"  {fmt_bytes(nbytes):>8}: {results[nbytes].sentence()}", file=sys.stderr)
    return results


def cost_table(results: dict[int, Comparison]) -> str:
    lines = [
        "| size | plain ms | checked ms | checked / plain (middle half) | extra µs per call "
        "| pairs | verdict |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for nbytes, c in results.items():
        lines.append(
            f"| {fmt_bytes(nbytes)} | {c.median_a * 1e3:.3f} | {c.median_b * 1e3:.3f} | "
            f"{c.ratio:.2f}x ({c.low:.2f}-{c.high:.2f}) | "
            f"{(c.median_b - c.median_a) * 1e6:+.0f} | {c.pairs} | "
            f"{'costs more' if c.verdict == 'slower' else c.verdict} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="minidp bench checked",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--sizes",
        type=positive_int,
        nargs="+",
        default=[4, 4096, 256 << 10, 16 << 20],
        help="all-reduce sizes in bytes (4 B, 4 KiB, 256 KiB, 16 MiB)",
    )
    p.add_argument("--budget", type=positive_float, default=2.0, help="seconds per size (2)")
    args = p.parse_args(argv)
    print("starting 2 rank processes ...", file=sys.stderr, flush=True)
    with ProcessWorld(2, timeout=300) as w:
        cost = w.run(checked_cost, args.sizes, args.budget, 400)[0]
    print(f"\nchecked mode vs plain, ring all-reduce, 2 ranks, torch {torch.__version__}:\n")
    print(cost_table(cost))
    print("\nmedians of the calls taking turns; the verdict is 'inconclusive' while the middle "
          "half of the pair ratios spans 1.0")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
