"""Benchmark: ``minidp.fully_shard`` against torch's FSDP2 ``fully_shard``, to a verdict.

    python -m minidp bench fsdp                  # 2 ranks, 16.6 M params: a few minutes
    python -m minidp bench fsdp --breakdown      # also forward / backward / step apart
    python -m minidp bench fsdp --quick          # seconds, tiny model: a smoke run

``bench zero``'s run (``zero.run``) with one pair: both sides wrap ``bench ddp``'s MLP
(width 1440: 16.6 M parameters) the same way — ``fully_shard`` on each Linear, then the
root, ``reshard_after_forward=True`` — AdamW, gloo; torch's is A, minidp's B, in ABBA
blocks to a verdict against minidp <= 1.05x torch. Also printed: all-gathers,
reduce-scatters and bytes sent per rank per step, minidp's counted (its spans and
``minidp.fsdp.traffic``), torch's from theory. torch < 2.8 has no reduce-scatter in gloo:
there only minidp's numbers print.

Test: ``pytest tests/test_bench_sharded.py -k fsdp``
"""

from __future__ import annotations

import statistics
import sys

from torch import nn

from minidp.tools.bench.abba import format_phases
from minidp.tools.bench.ddp import make_model
from minidp.tools.bench.zero import no_fsdp2, run

PAIR = ("FSDP", "torch fsdp2", "minidp fsdp", 1.05)  # (label, A, B, target for B / A)


def report(results: list[dict], world: int, numel: int, fsdp2: bool) -> None:
    r0 = results[0]
    names = r0["spans"]  # minidp's collectives in one step, counted from its trace
    gathers = sum(n.startswith("all-gather ") for n in names)
    scatters = sum(n.startswith("reduce-scatter ") for n in names)
    root_gathers = names.count("all-gather root")  # the root unit holds no parameters
    if fsdp2:
        s = r0["pairs"]["FSDP"]
        ratio, low, high = s.interval
        print(f"\n{'row':<13} {'step ms':>8}  (median of the ABBA steps, slowest rank)")
        print("-" * 60)
        print(f"{'torch fsdp2':<13} {s.median_a * 1e3:>8.1f}")
        print(
            f"{'minidp fsdp':<13} {s.median_b * 1e3:>8.1f}   "
            f"ratio {ratio:.3f}x (95% interval {low:.3f}-{high:.3f})"
        )
        print(f"\nverdict FSDP: {s.sentence()}")
    else:
        print(f"\ntorch FSDP2 rows skipped: {no_fsdp2()}")
    mb = 4 * numel / 1e6
    sent = statistics.mean(r["sent"]["minidp fsdp"] for r in results) / 1e6
    units = sum(isinstance(m, nn.Linear) for m in make_model(8))  # units holding parameters
    share = (world - 1) / world
    print(f"\nper rank per step (fp32 parameters = {mb:.2f} MB, {units} units with parameters):")
    print(f"  {'':<34} {'all-gathers':>11} {'reduce-scatters':>15} {'MB sent':>8}")
    print(
        f"  {'torch FSDP2, theory':<34} {2 * units:>11} {units:>15} {3 * share * mb:>8.2f}"
        "   (gather in forward + again in backward, reduce-scatter: 3(W-1)/W·Ψ)"
    )
    print(
        f"  {'minidp fully_shard, counted':<34} {gathers:>11} {scatters:>15} "
        f"{sent:>8.2f}   (mean over ranks; + message headers)"
    )
    if root_gathers:  # the MLP's root (nn.Sequential) has no parameters of its own
        print(
            f"  ({root_gathers} of minidp's all-gathers are the root unit's, which holds "
            "no parameters: an empty collective FSDP2 does not make)"
        )
    if "FSDP" in r0["phases"]:
        print()
        print("\n".join(format_phases(r0["phases"]["FSDP"])))


def main(argv: list[str] | None = None) -> int:
    return run("fsdp", __doc__, argv, (PAIR,), report, note=", reshard_after_forward=True")


if __name__ == "__main__":
    sys.exit(main())
