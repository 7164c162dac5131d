"""The catalog of faults and bad inputs: each must end in a clear error (or the result torch
gives) in bounded time, in a fresh world, with nothing left behind.

Run: ``python tests/fault_catalog.py`` (every row, about 3 minutes; ``--only WORD`` picks
rows by name: ``--only teacher`` runs the six a class can watch) prints each row's time to
the error, the root cause, what the other ranks did, whether it hung and what was left
over. Test: ``pytest -m slow tests/test_fault_catalog.py``.

The rows: the six below (a rank that raises, one SIGKILLed mid all-reduce, one sleeping
past a 2 s timeout, swapped all-reduces — silently wrong in plain mode, refused in checked
mode — and ops that disagree), then ``fault_cases.py``, ``fault_cases_launch.py`` and
``fault_cases_comm.py``. ``fault_runner.py`` runs one. Rank functions are module level:
spawned rank processes import them by name.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
from fault_cases import FAULTS
from fault_cases_comm import COMM_FAULTS
from fault_cases_launch import LAUNCH_FAULTS
from fault_runner import STALL_S, Fault, run_fault, table
from torch import nn

import minidp
from minidp.comm import all_reduce

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


# ---- the rows a class can watch ---------------------------------------------------------


def silent_pairing(results: list) -> str:
    return f"no error, WRONG RESULT: a = {results[0]:g} on rank 0 (right: 3)"


DETAIL = {"MINIDP_DEBUG": "DETAIL"}
TEACHER = [
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


CATALOG = TEACHER + FAULTS + LAUNCH_FAULTS + COMM_FAULTS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="rows whose name contains this ('teacher': the six)")
    args = p.parse_args(argv)
    if args.only == "teacher":
        faults = TEACHER
    else:
        faults = [f for f in CATALOG if args.only.lower() in f.name.lower()]
    print(f"{len(faults)} rows, each in a fresh world; torch {torch.__version__}", flush=True)
    outcomes = []
    for i, fault in enumerate(faults, 1):
        print(f"[{i}/{len(faults)}] {fault.name} ...", end=" ", file=sys.stderr, flush=True)
        outcomes.append(run_fault(fault))
        print(f"{outcomes[-1].seconds:.2f} s, {outcomes[-1].verdict}", file=sys.stderr)
    print("\n" + table(outcomes))
    errors = [o for o in outcomes if o.raised != "none"]
    print(
        f"\n{len(errors)}/{len(outcomes)} rows ended in an error, the slowest after "
        f"{max((o.seconds for o in errors), default=0):.2f} s; hung: "
        f"{sum(o.hung for o in outcomes)}; processes or rank threads left behind: "
        f"{sum(o.leftovers for o in outcomes)}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
