"""Benchmark: a rank fails, stalls or falls out of step — how long until a clear error?

Run: ``python -m minidp bench faults`` (about 20 s on 2 cores, then checked mode's cost;
``--only WORD`` runs the matching rows, ``--no-cost`` skips the cost, ``--help``).

A teacher's few cases, each in a FRESH world (rank processes, or threads with real gloo
groups), timed from the call into the world to the exception: a rank that raises, one
SIGKILLed mid 64 MiB all-reduce, one sleeping past a 2 s collective timeout (its time is
the timeout, by design), two ranks whose all-reduces are swapped — silently wrong in plain
mode, refused in checked mode (``MINIDP_DEBUG=DETAIL``) — or disagree on the op. Each row
(``fault_runner.run_fault``) says the root cause the launcher named and its first line,
what the other ranks did, whether it hung (every row has a backstop), leftovers (child
processes and rank threads still alive: none expected), and a verdict: "clear" when the
error is one a learner can act on. Then checked mode's cost (``minidp.comm.checked()``):
one ring all-reduce with and without it, taking turns (``allreduce.time_in_turns``); the
extra µs per call are the fingerprint's work (the call site and sequence number travel in
the header every collective sends anyway).

Not a test: ``pytest tests/test_faults.py`` checks these behaviours; the whole catalog of
faults and bad inputs runs in ``pytest -m slow tests/test_fault_catalog.py``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch import nn

import minidp
from minidp.comm import all_reduce, checked
from minidp.launch import ProcessWorld
from minidp.tools.bench.allreduce import fmt_bytes, time_in_turns
from minidp.tools.bench.args import positive_float, positive_int
from minidp.tools.bench.fault_runner import STALL_S, Fault, run_fault, table

KILL_NUMEL = 16 << 20  # 64 MiB of float32: the all-reduce rank 1 dies in
KILL_AFTER = 8 << 20  # ... once it has sent 8 MiB


# ---- rank functions (module level: they travel to the rank processes) ---------------------


def _ddp_step_raises(rank, world):
    """DDP steps; at step 2 rank 1 raises (its peer is inside the next all-reduce)."""
    ddp = minidp.DistributedDataParallel(nn.Linear(16, 4))
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
    for step in range(4):
        if rank == 1 and step == 2:
            raise ValueError(f"bad batch on rank {rank} at step {step}")
        ddp(x).square().mean().backward()


def _die_when(traffic, done: threading.Event) -> None:
    while not done.is_set():
        if traffic.sent_bytes >= KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.0005)


def killed_mid_all_reduce(rank: int, world: int) -> None:
    """Rank 1 SIGKILLs itself once it has sent KILL_AFTER bytes of a KILL_NUMEL all-reduce."""
    x = torch.ones(KILL_NUMEL)
    done = threading.Event()
    with minidp.comm.count_traffic() as traffic:
        if rank == 1:
            threading.Thread(target=_die_when, args=(traffic, done), daemon=True).start()
        try:
            minidp.comm.ring_all_reduce(x)
        finally:
            done.set()


def _sleeps_past_the_timeout(rank, world):
    group = dist.new_group(timeout=datetime.timedelta(seconds=STALL_S))
    if rank == 1:
        time.sleep(STALL_S + 1.0)  # never calls: rank 0's all-reduce waits for it
        return
    all_reduce(torch.ones(4), group=group)


def swapped(rank, world):
    """Rank 0 all-reduces a then b, rank 1 b then a: the same headers, swapped tensors, called
    from other lines (what checked mode compares)."""
    a = torch.full((4,), 1.0 + rank)
    b = torch.full((4,), 10.0 * (rank + 1))
    if rank == 0:
        all_reduce(a)
        all_reduce(b)
    else:
        all_reduce(b)
        all_reduce(a)
    return float(a[0])


def _ops_differ(rank, world):
    all_reduce(torch.ones(4), op="max" if rank == 1 else "sum")


# ---- the rows ---------------------------------------------------------------------------


def silent_pairing(results: list) -> str:
    return f"no error, WRONG RESULT: a = {results[0]:g} on rank 0 (right: 3)"


DETAIL = {"MINIDP_DEBUG": "DETAIL"}
FAULTS = [
    Fault("fault", "rank raises ValueError at DDP step 2", "processes", 2, _ddp_step_raises,
          (), r"rank 1 raised ValueError: bad batch"),
    Fault("fault", "rank SIGKILLed mid 64 MiB ring all-reduce", "processes", 3,
          killed_mid_all_reduce, (), r"rank 1 was killed by signal SIGKILL"),
    Fault("fault", f"rank sleeps past a {STALL_S:g} s collective timeout", "processes", 2,
          _sleeps_past_the_timeout, (),
          r"rank 0 raised CollectiveTimeout: .*waiting to recv from rank 1", stall=True),
    Fault("desync", "same-shape all-reduces swapped, plain mode", "threads", 2, swapped,
          (), r"MismatchError", on_success=silent_pairing),
    Fault("desync", "same-shape all-reduces swapped, MINIDP_DEBUG=DETAIL", "processes", 2,
          swapped, (), r"MismatchError: all_reduce \(checked mode\): (ranks are out of step|"
          r".*different lines)",
          env=DETAIL),
    Fault("desync", "op sum vs max", "threads", 2, _ops_differ, (),
          r"MismatchError: .*op max.*op sum"),
]  # fmt: skip


# ---- what checked mode costs --------------------------------------------------------------


def checked_cost(rank: int, world: int, sizes: list[int], budget_s: float, max_reps: int) -> dict:
    """Rank function: {nbytes: (plain s, checked s, reps)}; rank 0 reports progress."""
    results = {}
    for nbytes in sizes:
        ops = {}
        for mode in (False, True):

            def ring(t, mode=mode):
                with checked(mode):
                    minidp.comm.ring_all_reduce(t)

            ops[mode] = ring
        times = time_in_turns(ops, torch.randn(max(nbytes // 4, 1)), budget_s, max_reps)
        plain, fingerprinted = (statistics.median(times[m]) for m in (False, True))
        results[nbytes] = (plain, fingerprinted, len(times[False]))
        if rank == 0:
            print(f"  checked mode, {fmt_bytes(nbytes):>8}: plain {plain * 1e3:.3f} ms, "
                  f"checked {fingerprinted * 1e3:.3f} ms ({len(times[False])} reps)",
                  file=sys.stderr, flush=True)  # fmt: skip
    return results


def cost_table(results: dict[int, tuple[float, float, int]]) -> str:
    lines = [
        "| size | plain ms | checked ms | checked / plain | extra µs per call | reps |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for nbytes, (plain, fingerprinted, reps) in results.items():
        lines.append(
            f"| {fmt_bytes(nbytes)} | {plain * 1e3:.3f} | {fingerprinted * 1e3:.3f} | "
            f"{fingerprinted / plain:.2f}x | {(fingerprinted - plain) * 1e6:+.0f} | {reps} |"
        )
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="minidp bench faults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", default="", help="run only rows whose name contains this text")
    p.add_argument("--no-cost", action="store_true", help="skip the checked-mode measurement")
    p.add_argument(
        "--sizes",
        type=positive_int,
        nargs="+",
        default=[4, 4096, 256 << 10, 16 << 20],
        help="all-reduce sizes in bytes for the checked-mode cost (4 B, 4 KiB, 256 KiB, 16 MiB)",
    )
    p.add_argument("--budget", type=positive_float, default=2.0, help="seconds per size (2)")
    args = p.parse_args(argv)
    faults = [f for f in FAULTS if args.only.lower() in f.name.lower()]
    print(
        f"faults benchmark on {platform.machine()} with {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}, gloo over loopback; {len(faults)} rows, each in a fresh world",
        flush=True,
    )
    outcomes = []
    for i, fault in enumerate(faults, 1):
        print(f"[{i}/{len(faults)}] {fault.name} ...", end=" ", file=sys.stderr, flush=True)
        outcome = run_fault(fault)
        outcomes.append(outcome)
        print(f"{outcome.seconds:.2f} s, {outcome.verdict}", file=sys.stderr, flush=True)
    print()
    print(table(outcomes))
    hung = [o for o in outcomes if o.hung]
    leaked = sum(o.leftovers for o in outcomes)
    errors = [o for o in outcomes if o.raised != "none"]
    # "clear" (or "clear: ..." for a row whose right outcome is no exception), or no error
    # at all where that is the right answer to a valid input
    unclear = [
        o.fault.name
        for o in outcomes
        if not (o.verdict == "clear" or o.verdict.startswith("clear:"))
        and o.verdict != "no error (like torch)"
    ]
    print(
        f"\n{len(errors)}/{len(outcomes)} rows ended in an error, the slowest after "
        f"{max((o.seconds for o in errors), default=0):.2f} s; hung: {len(hung)}; "
        f"processes or rank threads left behind: {leaked}."
    )
    if unclear:
        print(f"not clear (see the verdict column): {'; '.join(unclear)}")
    if not args.no_cost:
        print("\nstarting 2 rank processes for checked mode's cost ...", file=sys.stderr)
        with ProcessWorld(2, timeout=300) as w:
            cost = w.run(checked_cost, args.sizes, args.budget, 400)[0]
        print("\nchecked mode (minidp.comm.checked()) vs plain, ring all-reduce, 2 ranks:\n")
        print(cost_table(cost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
