"""Benchmark: minidp's ZeRO against torch's, pair by pair, to a verdict — and bytes moved.

    python -m minidp bench zero                   # 2 ranks, 16.6 M params: a few minutes
    python -m minidp bench zero --world-size 4    # adds the HSDP pair (pairs of ranks)
    python -m minidp bench zero --breakdown       # also forward / backward / step apart
    python -m minidp bench zero --quick           # seconds, tiny model: a smoke run

Pairs, A against B (torch's first), each step forward + cross-entropy + backward + AdamW on
``bench ddp``'s MLP at width 1440 (16.6 M parameters, 66 MB of fp32 gradients), gloo:
**ZeRO-1 + DDP** (target <= 1.05x: torch's DDP + ``ZeroRedundancyOptimizer`` vs minidp's);
**ZeRO-2** (<= 1.10x: FSDP2 ``reshard_after_forward=False`` on each Linear and the root,
torch >= 2.8, vs ``Zero2Optimizer``); **ZeRO-2 vs DDP** (<= 1.10x: minidp's DDP vs
``Zero2Optimizer``, the same bytes, but ZeRO-2's all-gather after the step is not
overlapped); **HSDP** (<= 1.10x, an even ``--world-size`` >= 4: ``fully_shard`` on a (W/2,
2) mesh, torch's vs minidp's). Each pair is timed in ABBA blocks (``abba.run_pair``) until
the 95% interval of B/A is within ``±--halfwidth`` or ``--max-blocks`` / ``--budget`` run
out; verdicts against the target and 1.0. Bytes sent: minidp's counted (one step, mean over
ranks), torch's from theory (gloo's traffic is invisible to Python). ``--breakdown``: each
pair's phases apart (``abba.take_turns``). ``bench fsdp`` is this run with one pair.

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
from minidp import trace
from minidp.tools.bench import abba
from minidp.tools.bench.abba import format_phases, take_turns
from minidp.tools.bench.args import run_ranks, sharded_cli
from minidp.tools.bench.ddp import make_model
from minidp.tools.planner import stages
from minidp.tools.recorder.fsdp import shard_model

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
    return shard_model(model, fully_shard, last=True, mesh=mesh, reshard_after_forward=reshard)


def _hsdp(model: nn.Module, world: int, torch_side: bool) -> nn.Module:
    """HSDP on a (W/2, 2) mesh: torch's FSDP2 or minidp's, each Linear then the root."""
    if torch_side:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    else:
        init_device_mesh, fully_shard = minidp.init_device_mesh, minidp.fully_shard
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard"))
    return shard_model(model, fully_shard, last=True, mesh=mesh)


def build(name: str, width: int, world: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """One row's (model, optimizer), fresh from ``make_model(width)`` (same seed: same weights):
    ``"torch X"`` or ``"minidp X"`` for X in ddp, zero1 (on DDP), zero2 (torch's: ``fsdp2 no
    reshard``), fsdp (torch's: ``fsdp2``), hsdp; AdamW."""
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

    adamw, model = torch.optim.AdamW, make_model(width)
    side, kind = name.split(" ", 1)
    if side == "minidp" and kind in stages.STAGE_ORDER:  # ddp: ZeRO-2's bytes, one all-reduce
        return stages.build(kind, model, adamw, lr=LR)  # fsdp: each Linear, then the root
    if kind in ("ddp", "zero1"):
        net = nn.parallel.DistributedDataParallel(model)
        if kind == "zero1":
            return net, TorchZero(net.parameters(), adamw, lr=LR)
    elif name in ("torch fsdp2", "torch fsdp2 no reshard"):
        net = torch_fsdp2(model, world, reshard=name == "torch fsdp2")
    elif kind == "hsdp":
        net = _hsdp(model, world, side == "torch")
    else:
        raise ValueError(f"bench: no row named {name!r}")
    return net, adamw(net.parameters(), lr=LR)


def _skip(label: str, world: int, fsdp2: bool) -> str | None:
    """Why a pair does not run here, or None."""
    if label not in ("ZeRO-1 + DDP", "ZeRO-2 vs DDP") and not fsdp2:
        return no_fsdp2()
    if label == "HSDP" and (world < 4 or world % 2):
        return f"needs an even --world-size >= 4 (pairs of ranks), got {world}"
    return None


def _rank_main(rank: int, world: int, args) -> dict:
    """Every pair of ``args.pairs`` to a verdict (and its phases); minidp's FSDP and HSDP
    count their bytes and collectives over one more step."""
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    out: dict = {"pairs": {}, "sent": {}, "phases": {}, "spans": []}
    for label, a, b, target in args.pairs:
        skipped = _skip(label, world, args.fsdp2)
        if skipped and b != "minidp fsdp":
            continue
        sides = {n: build(n, args.width, world) for n in ((b,) if skipped else (a, b))}
        steps = {n: abba.train_step(net, opt, x, y) for n, (net, opt) in sides.items()}
        if skipped:  # FSDP without torch's FSDP2: minidp's counts alone
            for _ in range(args.warmup):
                steps[b]()
        else:
            out["pairs"][label] = abba.run_pair(rank, steps[a], steps[b], a, b, target, args.abba,
                                                args.warmup)  # fmt: skip
        if args.breakdown:
            out["phases"][label] = take_turns(sides, x, y, args.breakdown_steps)
        if b in ("minidp fsdp", "minidp hsdp"):  # its own running count, over one more step
            before = minidp.fsdp.traffic(sides[b][0]).sent_bytes
            with trace.recording() as rec:  # and its collectives' spans
                steps[b]()
            out["sent"][b] = minidp.fsdp.traffic(sides[b][0]).sent_bytes - before
            out["spans"] = [e["name"] for e in rec.events if e.get("pid") == rank
                            and e["ph"] == "X"]  # fmt: skip
        del sides, steps
        gc.collect()  # the next pair's models take their place
    if args.pairs == PAIRS:
        loss = nn.functional.cross_entropy
        for s in ("zero1", "zero2"):
            model = make_model(args.width)
            out["sent"][s] = stages.step_traffic(s, model, x, y, loss, torch.optim.AdamW, lr=LR)
    return out


def run(prog: str, doc: str, argv, pairs: tuple, report, note: str = "") -> int:
    """The sharded benches' command: parse, say what runs, run ``pairs``, ``report``."""
    args = sharded_cli(f"minidp bench {prog}", doc.split("\n")[0], WIDTH, argv)
    args.fsdp2, args.pairs = no_fsdp2() is None, pairs
    numel = sum(p.numel() for p in make_model(args.width).parameters())
    print(
        f"bench {prog}: {args.world_size} ranks (processes, gloo), MLP {numel / 1e6:.2f} M "
        f"params, AdamW, batch {args.batch} per rank{note}; ABBA blocks"
        f"{' per pair' if len(pairs) > 1 else ''} until the 95% interval is "
        f"±{args.halfwidth:.0%} ({args.min_blocks}-{args.max_blocks} blocks, {args.budget:.0f} "
        f"step-seconds at most); torch {torch.__version__}",
        flush=True,
    )
    return run_ranks(args, _rank_main, report, numel)


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
    if "minidp hsdp" in results[0]["sent"]:
        hsdp = statistics.mean(r["sent"]["minidp hsdp"] for r in results) / 1e6
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
    return run("zero", __doc__, argv, PAIRS, report)


if __name__ == "__main__":
    sys.exit(main())
