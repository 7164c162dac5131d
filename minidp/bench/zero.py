"""Benchmark: minidp's ZeRO against torch's in the same run — step time and bytes moved.

    python -m minidp bench zero                 # about a minute, 2 ranks
    python -m minidp bench zero --world-size 4 --rounds 5
    python -m minidp bench zero --quick         # a few seconds, small model

Rows (each rank: forward + cross-entropy + backward + AdamW step on the MLP of
``bench ddp``, ``--batch`` samples per rank, gloo on loopback):

* **torch ZeRO-1**: ``torch.nn.parallel.DistributedDataParallel`` +
  ``torch.distributed.optim.ZeroRedundancyOptimizer``;
* **minidp ZeRO-1**: ``minidp.DistributedDataParallel`` + ``minidp.ZeroRedundancyOptimizer``;
* **minidp ZeRO-2**: ``minidp.zero.Zero2Optimizer`` (reduce-scatter in backward);
* **torch FSDP2, no reshard**: ``fully_shard(reshard_after_forward=False)`` on a CPU mesh,
  torch's ZeRO-2-like mode (torch >= 2.8, where gloo has reduce-scatter);
* **torch DDP + AdamW**: the unsharded baseline;
* with ``--world-size`` 4 or more (even): **minidp HSDP** and **torch FSDP2 HSDP**,
  ``fully_shard(mesh=<(W/2, 2) mesh>)`` on each Linear and the root: shard within pairs of
  ranks, replicate across the pairs.

Rows take turns step by step; each round's median per row gives one ratio against its
torch counterpart, and the spread is the range of those ratios over the rounds. Bytes
moved are counted for minidp (``count_traffic``, one step, per rank, mean over ranks) and
given by theory for torch (gloo's traffic is not visible from Python).

Not a test; ``pytest tests/test_memory.py -k bench`` checks that ``--quick`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch import nn

import minidp
from minidp.bench.ddp import make_model
from minidp.launch import ProcessWorld
from minidp.zero import Zero2Optimizer
from minidp.zero.stages import step_traffic

LR = 1e-3


def _fsdp2(model: nn.Module, world: int):
    """torch's FSDP2 on a CPU mesh (each Linear, then the root), or None where unavailable."""
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        return None
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=False)
    return fully_shard(model, mesh=mesh, reshard_after_forward=False)


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


def _rows(width: int, world: int, fsdp2: bool) -> list[tuple[str, nn.Module, object]]:
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

    rows = []
    net = nn.parallel.DistributedDataParallel(make_model(width))
    rows.append(("torch zero1", net, TorchZero(net.parameters(), torch.optim.AdamW, lr=LR)))
    net = minidp.DistributedDataParallel(make_model(width))
    opt = minidp.ZeroRedundancyOptimizer(net.parameters(), torch.optim.AdamW, lr=LR)
    rows.append(("minidp zero1", net, opt))
    net = make_model(width)
    rows.append(("minidp zero2", net, Zero2Optimizer(net.parameters(), torch.optim.AdamW, lr=LR)))
    net = _fsdp2(make_model(width), world) if fsdp2 else None
    if net is not None:  # None: this torch has no fully_shard to import
        rows.append(("torch fsdp2", net, torch.optim.AdamW(net.parameters(), lr=LR)))
    net = nn.parallel.DistributedDataParallel(make_model(width))
    rows.append(("torch ddp", net, torch.optim.AdamW(net.parameters(), lr=LR)))
    if fsdp2 and world >= 4 and world % 2 == 0:
        for name, torch_side in (("torch hsdp", True), ("minidp hsdp", False)):
            net = _hsdp(make_model(width), world, torch_side)
            rows.append((name, net, torch.optim.AdamW(net.parameters(), lr=LR)))
    return rows


def _rank_main(rank, world, args) -> dict:
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, args.width, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    rows = _rows(args.width, world, args.fsdp2)
    times: dict[str, list[list[float]]] = {name: [] for name, _, _ in rows}

    def step(net, opt) -> float:
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
        return time.perf_counter() - t0

    for _, net, opt in rows:
        for _ in range(args.warmup):
            step(net, opt)
    for r in range(args.rounds):
        for name in times:
            times[name].append([])
        for _ in range(args.steps):
            for name, net, opt in rows:
                times[name][-1].append(step(net, opt))
        if rank == 0:
            done = ", ".join(f"{n} {statistics.median(t[-1]) * 1e3:.0f}" for n, t in times.items())
            print(f"  [round {r + 1}/{args.rounds}] median ms: {done}", flush=True)
    loss = nn.functional.cross_entropy
    sent = {
        s: step_traffic(s, make_model(args.width), x, y, loss, torch.optim.AdamW, lr=LR)
        for s in ("zero1", "zero2")
    }
    for name, net, _ in rows:  # HSDP: minidp's own count, all steps so far, per step
        if name == "minidp hsdp":
            steps = args.warmup + args.rounds * args.steps
            sent["hsdp"] = minidp.fsdp.traffic(net).sent_bytes / steps
    return {"times": times, "sent": sent}


def _round_ms(results: list[dict], name: str) -> list[float]:
    """Per round, the slowest rank's median step (a step is done when every rank is)."""
    rounds = len(results[0]["times"][name])
    return [
        max(statistics.median(r["times"][name][i]) for r in results) * 1e3 for i in range(rounds)
    ]


def report(results: list[dict], world: int, numel: int) -> None:
    ms = {name: _round_ms(results, name) for name in results[0]["times"]}
    pairs = {"minidp zero1": "torch zero1", "minidp zero2": "torch fsdp2"}
    pairs["minidp hsdp"] = "torch hsdp"
    print(f"\n{'row':<16} {'step ms':>8}  {'ratio vs torch (min..max over rounds)':<40}")
    print("-" * 66)
    for name, rounds in ms.items():
        ref = pairs.get(name)
        text = ""
        if ref in ms:
            ratios = [a / b for a, b in zip(rounds, ms[ref])]
            text = (
                f"{statistics.median(ratios):.2f}x vs {ref} ({min(ratios):.2f}..{max(ratios):.2f})"
            )
        print(f"{name:<16} {statistics.median(rounds):>8.1f}  {text}")
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
    parser = argparse.ArgumentParser(prog="minidp bench zero", description=__doc__.split("\n")[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--width", type=int, default=512, help="MLP width (512: 2.1M params)")
    parser.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per row per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per row, first")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--quick", action="store_true", help="tiny model, 1 round: smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.steps, args.rounds, args.warmup = 64, 2, 1, 1
    major, minor = (int(v) for v in torch.__version__.split(".")[:2])
    args.fsdp2 = (major, minor) >= (2, 8)  # gloo's reduce-scatter
    numel = sum(p.numel() for p in make_model(args.width).parameters())
    print(
        f"bench zero: {args.world_size} ranks (processes, gloo), MLP {numel / 1e6:.2f} M params, "
        f"AdamW, batch {args.batch} per rank, {args.rounds} rounds x {args.steps} steps per row "
        f"(rows take turns), torch {torch.__version__}"
        + ("" if args.fsdp2 else "; FSDP2 row skipped: gloo has no reduce-scatter before 2.8"),
        flush=True,
    )
    t0 = time.perf_counter()
    with ProcessWorld(args.world_size, timeout=300) as world:
        results = world.run(_rank_main, args)
    report(results, args.world_size, numel)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
