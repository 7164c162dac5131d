"""Benchmark: minidp's ZeRO against torch's, pair by pair, to a verdict — and bytes moved.

    python -m minidp bench zero                   # 2 ranks, 16.6 M params: a few minutes
    python -m minidp bench zero --world-size 4    # adds the HSDP pair (pairs of ranks)
    python -m minidp bench zero --breakdown       # also forward / backward / step apart
    python -m minidp bench zero --quick           # seconds, tiny model: a smoke run

Pairs, A against B (torch's first where torch is in the pair); each step on every rank is forward +
cross-entropy + backward + AdamW step on the MLP of ``bench ddp`` at width 1440 (16.6 M
parameters, 66 MB of fp32 gradients: communication matters), ``--batch`` samples per rank,
gloo on loopback:

* **ZeRO-1 + DDP** (target <= 1.05x): ``torch.nn.parallel.DistributedDataParallel`` +
  ``torch.distributed.optim.ZeroRedundancyOptimizer`` vs ``minidp.DistributedDataParallel``
  + ``minidp.ZeroRedundancyOptimizer``;
* **ZeRO-2** (target <= 1.10x): torch FSDP2 ``fully_shard(reshard_after_forward=False)``
  on each Linear and the root (torch's ZeRO-2-like mode; torch >= 2.8, where gloo has
  reduce-scatter) vs ``minidp.zero.Zero2Optimizer``;
* **ZeRO-2 vs DDP** (target <= 1.10x): ``minidp.DistributedDataParallel`` + AdamW vs
  ``Zero2Optimizer``, both minidp's, both overlapping their gradient collective with
  backward on the same engine (``comm/launch_queue.py``); the same bytes, but ZeRO-2's
  all-gather after the optimizer step is not overlapped with anything;
* **HSDP** (target <= 1.10x; ``--world-size`` 4 or more, even): ``fully_shard(mesh=<(W/2,
  2) mesh>)`` on each Linear and the root, torch's vs ``minidp.fully_shard``'s.

Each pair's two models are built, warmed up and timed in ABBA blocks (A, B, B, A; every
step after a barrier, counted at the slowest rank) until the 95% interval of the ratio is
within ``±--halfwidth`` or ``--max-blocks`` / ``--budget`` run out (``minidp.tools.bench.abba``);
then freed before the next pair. The verdict: meets / misses / inconclusive against the
target, faster / slower / inconclusive against 1.0. Bytes sent are counted for minidp
(``count_traffic``, one step, per rank, mean over ranks) and given by theory for torch
(gloo's traffic is not visible from Python).

``--breakdown`` times each pair's phases apart after its verdict (``phases.py``): where a
gap comes from — DDP's all-reduce shows in backward, ZeRO-1's broadcast and ZeRO-2's
all-gather in the optimizer step.

Test: ``pytest tests/test_bench_sharded.py -k zero``; ``pytest tests/test_memory.py -m slow
-k bench`` (the bytes at 4 ranks).
"""

from __future__ import annotations

import gc
import statistics
import sys

import torch
from torch import nn

import minidp
from minidp.tools.bench import abba
from minidp.tools.bench.args import run_ranks, sharded_cli
from minidp.tools.bench.ddp import make_model
from minidp.tools.bench.phases import format_phases, take_turns
from minidp.tools.planner.stages import step_traffic
from minidp.zero import Zero2Optimizer

LR = 1e-3
WIDTH = 1440  # make_model(w) has 8w² + 15w + 10 parameters: 16.6 M at 1440
PAIRS = (  # (label, row A, row B, target for B / A)
    ("ZeRO-1 + DDP", "torch zero1", "minidp zero1", 1.05),
    ("ZeRO-2", "torch fsdp2 no reshard", "minidp zero2", 1.10),
    ("ZeRO-2 vs DDP", "minidp ddp", "minidp zero2", 1.10),
    ("HSDP", "torch hsdp", "minidp hsdp", 1.10),
)


def no_fsdp2() -> str | None:
    """Why torch's FSDP2 cannot run on a gloo mesh here, or None where it can."""
    major, minor = (int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
    if (major, minor) < (2, 8):
        return f"torch {torch.__version__}'s gloo has no reduce-scatter (FSDP2 needs >= 2.8)"
    return None


def torch_fsdp2(model: nn.Module, world: int, reshard: bool = False) -> nn.Module:
    """torch's FSDP2 on a CPU mesh: each Linear, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard)


def _hsdp(model: nn.Module, world: int, torch_side: bool) -> nn.Module:
    """HSDP on a (W/2, 2) mesh: torch's FSDP2 or minidp's, each Linear then the root."""
    names = ("replicate", "shard")
    if torch_side:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    else:
        init_device_mesh, fully_shard = minidp.init_device_mesh, minidp.fully_shard
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=names)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def build(name: str, width: int, world: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """One row's (model, optimizer), fresh from ``make_model(width)`` (same seed: same weights)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

    adamw = torch.optim.AdamW
    if name == "torch zero1":
        net = nn.parallel.DistributedDataParallel(make_model(width))
        return net, TorchZero(net.parameters(), adamw, lr=LR)
    if name == "minidp zero1":
        net = minidp.DistributedDataParallel(make_model(width))
        return net, minidp.ZeroRedundancyOptimizer(net.parameters(), adamw, lr=LR)
    if name == "minidp ddp":  # the same bytes in one all-reduce, overlapped with backward
        net = minidp.DistributedDataParallel(make_model(width))
        return net, adamw(net.parameters(), lr=LR)
    if name == "minidp zero2":
        net = make_model(width)
        return net, Zero2Optimizer(net.parameters(), adamw, lr=LR)
    if name == "torch fsdp2 no reshard":
        net = torch_fsdp2(make_model(width), world)
    elif name in ("torch hsdp", "minidp hsdp"):
        net = _hsdp(make_model(width), world, name.startswith("torch"))
    else:
        raise ValueError(f"bench zero: no row named {name!r}")
    return net, adamw(net.parameters(), lr=LR)


def _skip(label: str, world: int, fsdp2: bool) -> str | None:
    """Why a pair does not run here, or None."""
    if label not in ("ZeRO-1 + DDP", "ZeRO-2 vs DDP") and not fsdp2:
        return no_fsdp2()
    if label == "HSDP" and (world < 4 or world % 2):
        return f"needs an even --world-size >= 4 (pairs of ranks), got {world}"
    return None


def _rank_main(rank: int, world: int, args) -> dict:
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    pairs, sent, phases = {}, {}, {}
    for label, a, b, target in PAIRS:
        if _skip(label, world, args.fsdp2):
            continue
        net_a, opt_a = build(a, args.width, world)
        net_b, opt_b = build(b, args.width, world)
        step_a = abba.train_step(net_a, opt_a, x, y)
        step_b = abba.train_step(net_b, opt_b, x, y)
        pairs[label] = abba.run_pair(rank, step_a, step_b, a, b, target, args.abba, args.warmup)
        if args.breakdown:
            sides = {a: (net_a, opt_a), b: (net_b, opt_b)}
            phases[label] = take_turns(sides, x, y, args.breakdown_steps)
        if b == "minidp hsdp":  # its own running count, over one more step
            before = minidp.fsdp.traffic(net_b).sent_bytes
            step_b()
            sent["hsdp"] = minidp.fsdp.traffic(net_b).sent_bytes - before
        del net_a, opt_a, net_b, opt_b, step_a, step_b
        gc.collect()  # the next pair's models take their place
    loss = nn.functional.cross_entropy
    for s in ("zero1", "zero2"):
        sent[s] = step_traffic(s, make_model(args.width), x, y, loss, torch.optim.AdamW, lr=LR)
    return {"pairs": pairs, "sent": sent, "phases": phases}


def report(results: list[dict], world: int, numel: int, fsdp2: bool) -> None:
    pairs = results[0]["pairs"]  # every rank holds the same (shared) numbers
    print(
        f"\n{'pair':<14} {'A ms':>9} {'B ms':>10} {'B/A':>7} {'95% interval':>14} "
        f"{'blocks':>6}  {'vs 1.0':<13} target  (A, B)"
    )
    print("-" * 106)
    for label, _a, _b, target in PAIRS:
        why = _skip(label, world, fsdp2)
        if why:
            print(f"{label:<14} skipped: {why}")
            continue
        s = pairs[label]
        ratio, low, high = s.interval
        print(
            f"{label:<14} {s.median_a * 1e3:>9.1f} {s.median_b * 1e3:>10.1f} {ratio:>6.3f}x "
            f"{low:>6.3f}-{high:.3f}x {len(s.blocks):>6}  {s.verdict:<13} "
            f"<= {target:.2f}x: {s.target_verdict}  ({_a}, {_b})"
        )
    print()
    for label in pairs:
        print(f"verdict {label}: {pairs[label].sentence()}")
    for label, times in results[0]["phases"].items():
        print(f"\n{label}:")
        print("\n".join(format_phases(times)))
    mb = 4 * numel / 1e6
    ring = 2 * (world - 1) / world * mb
    sent = {s: statistics.mean(r["sent"][s] for r in results) / 1e6 for s in ("zero1", "zero2")}
    print(f"\nbytes sent per rank per step (MB; fp32 gradients/parameters = {mb:.2f} MB):")
    print(f"  DDP all-reduce, theory 2(W-1)/W·Ψ:          {ring:.2f}")
    print(
        f"  ZeRO-1 (all-reduce + broadcast), theory:    {ring + (world - 1) / world * mb:.2f}"
        f"   minidp counted: {sent['zero1']:.2f}   (torch ZeRO: same layout)"
    )
    print(
        f"  ZeRO-2 (reduce-scatter + all-gather), theory: {ring:.2f}"
        f"   minidp counted: {sent['zero2']:.2f}"
    )
    if "hsdp" in results[0]["sent"]:
        hsdp = statistics.mean(r["sent"]["hsdp"] for r in results) / 1e6
        # within a pair (S = 2): all-gather in forward and again in backward, reduce-scatter,
        # each (S-1)/S of the parameters; across pairs (R = W/2): the all-reduce of this
        # rank's 1/S gradient shard, 2(R-1)/R of it
        s_, r_ = 2, world // 2
        theory = 3 * (s_ - 1) / s_ * mb + 2 * (r_ - 1) / r_ * mb / s_
        print(
            f"  HSDP (W/2 x 2), theory 3(S-1)/S·Ψ + 2(R-1)/R·Ψ/S: {theory:.2f}"
            f"   minidp counted: {hsdp:.2f}   (only the all-reduce crosses pairs)"
        )


def main(argv: list[str] | None = None) -> int:
    args = sharded_cli("minidp bench zero", __doc__.split("\n")[0], WIDTH, argv)
    args.fsdp2 = no_fsdp2() is None
    numel = sum(p.numel() for p in make_model(args.width).parameters())
    print(
        f"bench zero: {args.world_size} ranks (processes, gloo), MLP {numel / 1e6:.2f} M params, "
        f"AdamW, batch {args.batch} per rank; ABBA blocks per pair until the 95% interval is "
        f"±{args.halfwidth:.0%} ({args.min_blocks}-{args.max_blocks} blocks, {args.budget:.0f} "
        f"step-seconds at most); torch {torch.__version__}",
        flush=True,
    )
    return run_ranks(args, _rank_main, report, numel)


if __name__ == "__main__":
    sys.exit(main())
