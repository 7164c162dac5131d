"""Benchmark: ``minidp.fully_shard`` against torch's FSDP2 ``fully_shard``, to a verdict.

    python -m minidp bench fsdp                  # 2 ranks, 16.6 M params: a few minutes
    python -m minidp bench fsdp --breakdown      # also forward / backward / step apart
    python -m minidp bench fsdp --quick          # seconds, tiny model: a smoke run

Both sides wrap the MLP of ``bench ddp`` (width 1440: 16.6 M parameters) the same way:
``fully_shard`` on each Linear, then on the root, ``reshard_after_forward=True`` (the
default: each unit is gathered in forward, freed, and gathered again in backward); AdamW;
``--batch`` samples per rank; gloo on loopback. torch's side is ``A``, minidp's ``B``; they
run in ABBA blocks (every step after a barrier, counted at the slowest rank) until the 95%
interval of ``minidp / torch`` is within ``±--halfwidth``, or ``--max-blocks`` /
``--budget`` run out (``minidp.tools.bench.abba``); target: minidp <= 1.05x torch.

Also printed: all-gathers and reduce-scatters per step and bytes sent per rank per step —
minidp's counted (its spans in ``minidp.trace`` and ``minidp.fsdp.traffic``, one step),
torch's from theory (gloo's traffic is not visible from Python). ``--breakdown`` times the
three phases of a step apart (zero_grad + forward + loss, backward, optimizer step), the
two sides taking turns step by step, per-phase medians at the slowest rank: where a gap
comes from. torch < 2.8 has no reduce-scatter in gloo, so there only minidp's numbers print.

Test: ``pytest tests/test_bench_sharded.py -k fsdp``
"""

from __future__ import annotations

import statistics
import sys

import torch
from torch import nn

import minidp
from minidp import trace
from minidp.tools.bench import abba
from minidp.tools.bench.args import run_ranks, sharded_cli
from minidp.tools.bench.ddp import make_model
from minidp.tools.bench.phases import format_phases, take_turns
from minidp.tools.bench.zero import LR, WIDTH, no_fsdp2, torch_fsdp2

TARGET = 1.05


def _minidp_fsdp(model: nn.Module) -> nn.Module:
    """``minidp.fully_shard`` on each Linear, then the root (as torch's side is wrapped)."""
    for layer in model:
        if isinstance(layer, nn.Linear):
            minidp.fully_shard(layer)
    return minidp.fully_shard(model)


def _rank_main(rank: int, world: int, args) -> dict:
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    mine = _minidp_fsdp(make_model(args.width))
    mine_opt = torch.optim.AdamW(mine.parameters(), lr=LR)
    step_b = abba.train_step(mine, mine_opt, x, y)
    out: dict = {}
    if args.fsdp2:
        theirs = torch_fsdp2(make_model(args.width), world, reshard=True)
        theirs_opt = torch.optim.AdamW(theirs.parameters(), lr=LR)
        step_a = abba.train_step(theirs, theirs_opt, x, y)
        out["pair"] = abba.run_pair(
            rank, step_a, step_b, "torch fsdp2", "minidp fsdp", TARGET, args.abba, args.warmup
        )
    else:
        for _ in range(args.warmup):
            step_b()
    before = minidp.fsdp.traffic(mine).sent_bytes
    with trace.recording() as rec:  # one step: count the collectives' spans
        step_b()
    out["sent"] = minidp.fsdp.traffic(mine).sent_bytes - before
    names = [e["name"] for e in rec.events if e.get("pid") == rank and e["ph"] == "X"]
    out["gathers"] = sum(n.startswith("all-gather ") for n in names)
    out["root gathers"] = names.count("all-gather root")  # the root unit holds no parameters
    out["scatters"] = sum(n.startswith("reduce-scatter ") for n in names)
    if args.breakdown:
        sides = {"minidp fsdp": (mine, mine_opt)}
        if args.fsdp2:
            sides = {"torch fsdp2": (theirs, theirs_opt), **sides}
        out["phases"] = take_turns(sides, x, y, args.breakdown_steps)
    return out


def report(results: list[dict], world: int, numel: int, fsdp2: bool) -> None:
    r0 = results[0]
    if fsdp2:
        s = r0["pair"]
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
    sent = statistics.mean(r["sent"] for r in results) / 1e6
    units = sum(isinstance(m, nn.Linear) for m in make_model(8))  # units holding parameters
    share = (world - 1) / world
    print(f"\nper rank per step (fp32 parameters = {mb:.2f} MB, {units} units with parameters):")
    print(f"  {'':<34} {'all-gathers':>11} {'reduce-scatters':>15} {'MB sent':>8}")
    print(
        f"  {'torch FSDP2, theory':<34} {2 * units:>11} {units:>15} {3 * share * mb:>8.2f}"
        "   (gather in forward + again in backward, reduce-scatter: 3(W-1)/W·Ψ)"
    )
    print(
        f"  {'minidp fully_shard, counted':<34} {r0['gathers']:>11} {r0['scatters']:>15} "
        f"{sent:>8.2f}   (mean over ranks; + message headers)"
    )
    if r0["root gathers"]:  # the MLP's root (nn.Sequential) has no parameters of its own
        print(
            f"  ({r0['root gathers']} of minidp's all-gathers are the root unit's, which holds "
            "no parameters: an empty collective FSDP2 does not make)"
        )
    if "phases" in r0:
        print()
        print("\n".join(format_phases(r0["phases"])))


def main(argv: list[str] | None = None) -> int:
    args = sharded_cli("minidp bench fsdp", __doc__.split("\n")[0], WIDTH, argv)
    args.fsdp2 = no_fsdp2() is None
    numel = sum(p.numel() for p in make_model(args.width).parameters())
    print(
        f"bench fsdp: {args.world_size} ranks (processes, gloo), MLP {numel / 1e6:.2f} M params, "
        f"AdamW, batch {args.batch} per rank, reshard_after_forward=True; ABBA blocks until "
        f"the 95% interval is ±{args.halfwidth:.0%} ({args.min_blocks}-{args.max_blocks} "
        f"blocks, {args.budget:.0f} step-seconds at most); torch {torch.__version__}",
        flush=True,
    )
    return run_ranks(args, _rank_main, report, numel)


if __name__ == "__main__":
    sys.exit(main())
