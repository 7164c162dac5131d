"""Benchmark: minidp DataParallel vs torch.nn.DataParallel vs one device, per training step.

    python -m minidp bench dp                         # default: < 1 minute on 2 CPU cores
    python -m minidp bench dp --devices 1,2,4 --batch 512 --steps 30
    python -m minidp bench dp --width 256 --steps 5   # quick

A step is forward + MSE + backward + SGD on an MLP (``--width``, three layers), timed as
the median of ``--steps`` steps; the rows take turns in ``--rounds`` rounds (each with its
own warm-up), so a busy machine slows all rows alike. One intra-op thread by default
(``--intra-op-threads``): n replica threads x cores threads would oversubscribe the machine.
Rows: **one device** (the plain model on the full batch); **torch.nn.DataParallel** on the
same devices — without GPUs torch's wrapper *is* the plain model (the table says so);
``--gpus`` runs every row on the visible GPUs, chosen by the flag, never guessed; **minidp
DataParallel** with ``n`` devices — on CPU simulated ones (threads sharing the cores), so it
measures DP's overhead (replicate every step, threads, gather, the gradient sum), not a
speed-up, beside "n chunks in turn" on one device. Also: ``replicate`` alone per step, and
the bytes per device of one minidp step (``planner.dp_memory.memory_report``).

Test: ``pytest tests/test_dp_demo_bench.py -k bench``
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

from minidp.dp import DataParallel, replicate
from minidp.dp.devices import gpu_count, official_data_parallel
from minidp.tools.bench.args import int_list, nonnegative_int, positive_int
from minidp.tools.planner.dp_memory import memory_report
from minidp.tools.recorder import mlp


class Chunked(nn.Module):
    """The per-chunk definition of DP on one device: same arithmetic, no threads/replicas."""

    def __init__(self, module: nn.Module, chunks: int) -> None:
        super().__init__()
        self.module, self.chunks = module, chunks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.module(c) for c in x.chunk(self.chunks)])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Row:
    """One configuration: a network, its optimizer and the step times measured so far."""

    def __init__(self, name: str, net: nn.Module, devices: int, note: str = "") -> None:
        self.name, self.net, self.devices, self.note = name, net, devices, note
        self.opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        self.times: list[float] = []

    def step(self, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
        """Seconds of one forward + backward + SGD step."""
        sync(device)
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(self.net(x), y).backward()
        self.opt.step()
        sync(device)
        return time.perf_counter() - t0


def time_rows(rows: list[Row], x, y, steps: int, warmup: int, rounds: int, device) -> None:
    """Interleave the rows in ``rounds`` rounds, so a change in machine load (other jobs)
    hits every row alike; keep the times after each round's warm-up steps."""
    per_round = max(1, steps // rounds)
    for r in range(rounds):
        for row in rows:
            print(f"  round {r + 1}/{rounds}: {row.name} ...", flush=True)
            for i in range(warmup + per_round):
                t = row.step(x, y, device)
                if i >= warmup:
                    row.times.append(t)


def time_call(fn: Callable[[], object], steps: int, device) -> float:
    """Median seconds of ``fn()`` over ``steps`` calls after two warm-up calls."""
    times = []
    for _ in range(steps + 2):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="minidp bench dp",
        description="Step time of minidp DataParallel vs torch.nn.DataParallel vs one device.",
    )
    parser.add_argument(
        "--devices", type=int_list, default=[2, 4], help="simulated device counts (CPU), e.g. 2,4"
    )
    parser.add_argument("--gpus", action="store_true", help="use every visible GPU instead")
    parser.add_argument("--batch", type=positive_int, default=256)
    parser.add_argument("--width", type=positive_int, default=512, help="hidden units of the MLP")
    parser.add_argument("--steps", type=positive_int, default=90, help="timed steps per row")
    parser.add_argument("--warmup", type=nonnegative_int, default=2, help="untimed steps/round")
    parser.add_argument("--rounds", type=positive_int, default=5, help="interleaved rounds")
    parser.add_argument(
        "--intra-op-threads",
        type=nonnegative_int,
        default=1,
        help="torch.set_num_threads for every row (default 1; 0 keeps torch's default)",
    )
    args = parser.parse_args(argv)
    if args.gpus and gpu_count() < 1:
        parser.error("--gpus: no CUDA device visible (leave it out to simulate devices on CPU)")
    threads_before = torch.get_num_threads()
    if args.intra_op_threads > 0:
        # Each replica thread would otherwise start its own pool of intra-op threads:
        # n x cores threads fighting for the cores. One per op makes the rows comparable
        # and leaves the parallelism to DataParallel's threads.
        torch.set_num_threads(args.intra_op_threads)
    try:
        bench(args)
    finally:
        torch.set_num_threads(threads_before)  # a process-wide setting: put it back
    return 0


def bench(args: argparse.Namespace) -> None:
    """Time every row, print the table and the byte report."""

    gpus = gpu_count() if args.gpus else 0  # the devices asked for, not the machine's
    main_dev = torch.device("cuda", 0) if gpus else torch.device("cpu")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, args.width, generator=g).to(main_dev)
    y = torch.randn(args.batch, 10, generator=g).to(main_dev)
    base = mlp(args.width, args.width, args.width, 10).to(main_dev)
    n_params = sum(p.numel() for p in base.parameters())
    print(
        f"bench dp: MLP {args.width}x3 ({n_params / 1e6:.2f} M params), batch {args.batch}, "
        f"median of {args.steps} steps (forward+backward+SGD) per row, in {args.rounds} "
        f"interleaved rounds"
    )
    print(
        f"devices: {f'{gpus} GPU(s)' if gpus else 'simulated on CPU'}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s)"
    )

    if gpus:
        configs = [list(range(gpus))]
    else:
        configs = [["cpu"] * k for k in args.devices]
    official_devices = [torch.device("cuda", i) for i in range(gpus)] or [main_dev]
    torch_dp = official_data_parallel(copy.deepcopy(base), official_devices)
    rows = [
        Row("one device (plain model)", copy.deepcopy(base), 1),
        Row(
            "torch.nn.DataParallel",
            torch_dp,
            max(gpus, 1),
            "" if gpus else "without GPUs it is the plain model",
        ),
    ]
    replicate_times = []
    for ids in configs:
        ours = DataParallel(copy.deepcopy(base), device_ids=ids)
        kind = "GPUs" if gpus else "simulated"
        rows.append(Row(f"minidp DataParallel ({kind})", ours, len(ids)))
        replicate_once = lambda m=ours.module, d=ours.device_ids: replicate(m, d)  # noqa: E731
        replicate_times.append((len(ids), time_call(replicate_once, args.steps, main_dev)))
        if not gpus:
            chunked = Chunked(copy.deepcopy(base), len(ids))
            rows.append(Row(f"one device, {len(ids)} chunks in turn", chunked, 1))
    time_rows(rows, x, y, args.steps, args.warmup, args.rounds, main_dev)

    one, official = (statistics.median(r.times) for r in rows[:2])
    print()
    head = f"{'configuration':<34} {'devices':>7} {'step ms':>9} {'vs one':>7} {'vs torch DP':>11}"
    print(head)
    print("-" * len(head))
    for r in rows:
        sec = statistics.median(r.times)
        line = f"{r.name:<34} {r.devices:>7} {sec * 1e3:>9.2f} {sec / one:>6.2f}x "
        print(line + f"{sec / official:>10.2f}x" + (f"  ({r.note})" if r.note else ""))
    for n, sec in replicate_times:
        print(f"  replicate() alone, {n} devices: {sec * 1e3:.2f} ms per step")
    if not gpus:
        print(
            "  (CPU: simulated devices share the same cores, so the minidp rows show DP's "
            "overhead, not a speed-up; compare each with its 'chunks in turn' row)"
        )

    ids = configs[-1]
    print(f"\nbytes per device, one minidp step on {len(ids)} devices:")
    report = memory_report(
        DataParallel(copy.deepcopy(base), device_ids=ids),
        x,
        loss_fn=lambda out: nn.functional.mse_loss(out, y),
    )
    print(report)


if __name__ == "__main__":
    sys.exit(main())
