"""Faults and bad inputs of DDP, DataParallel and training loops, rows of the catalog
(``fault_catalog.py``: ``python tests/fault_catalog.py``, ``pytest -m slow
tests/test_fault_catalog.py``).

Each :class:`fault_runner.Fault` names its world ("processes",
"threads" or "local"), a rank function that misbehaves on purpose, and the regex the first
line of a CLEAR error must match; the runner (``fault_runner.run_fault``) starts the world,
times the error and judges it. Rank functions are module level: spawned rank processes
import them by name.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist
from fault_runner import STALL_S, Fault
from torch import nn

import minidp
from minidp.comm import all_reduce, checked

# ---- rank functions (module level: they travel to the rank processes) ---------------------


def _model() -> nn.Sequential:
    g = torch.Generator().manual_seed(0)  # thread ranks share the global RNG: explicit
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.Linear(64, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


def _short_group():
    """A group with a STALL_S timeout (every rank must call this, before any stall)."""
    return dist.new_group(timeout=datetime.timedelta(seconds=STALL_S))


def _train_until(rank, world, failing_rank, how):
    """DDP steps; at step 2 ``failing_rank`` raises, exits, or stops (uneven inputs)."""
    group = _short_group() if how == "returns_early" else None
    ddp = minidp.DistributedDataParallel(_model(), process_group=group)
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
    for step in range(4):
        if rank == failing_rank and step == 2:
            if how == "raises":
                raise ValueError(f"bad batch on rank {rank} at step {step}")
            if how == "exits":
                os._exit(3)
            if how == "returns_early":
                return step
        ddp(x).square().mean().backward()
    return step


def _spins(rank, world):
    group = _short_group()
    if rank == 1:
        while True:  # spins in pure Python: no collective of its own to time out
            pass
    all_reduce(torch.ones(4), group=group)


def _all_spin(rank, world):
    while True:
        pass


def _skipped(rank, world):
    if rank == 0:
        all_reduce(torch.tensor([1.0]))  # a metric only rank 0 reduces
    all_reduce(torch.tensor([2.0]))


def _reshaped(rank, world):
    all_reduce(torch.zeros((2, 3) if rank == 0 else (3, 2)))


def _mixed(rank, world):
    with checked(rank == 0):
        all_reduce(torch.ones(4))


def _mismatch(rank, world, case):
    if case == "numel":
        all_reduce(torch.ones(12 if rank == 0 else 10))
    elif case == "dtype":
        all_reduce(torch.ones(4, dtype=torch.float64 if rank == 1 else torch.float32))
    elif case == "kind":
        t = torch.ones(4)
        minidp.comm.broadcast(t, 0) if rank == 1 else all_reduce(t)


def _ddp_differs(rank, world, case):
    DDP = minidp.DistributedDataParallel
    if case == "parameters":
        extra = [nn.Linear(4, 4)] if rank == 1 else []
        DDP(nn.Sequential(_model(), *extra))
    elif case == "shapes":
        DDP(nn.Linear(16, 8 if rank == 0 else 9))
    elif case == "buckets":
        DDP(_model(), find_unused_parameters=True, bucket_cap_mb=0.01 * (1 + rank))
    elif case == "find_unused":
        ddp = DDP(_model(), find_unused_parameters=rank == 1)
        for _ in range(2):
            ddp(torch.ones(2, 16)).sum().backward()


def _bad_input(rank, world, case):
    if case == "int_avg":
        all_reduce(torch.ones(3, dtype=torch.int64), op="avg")
    elif case == "bool":
        all_reduce(torch.ones(3, dtype=torch.bool))
    elif case == "op":
        all_reduce(torch.ones(3), op="median")
    elif case == "src":
        minidp.comm.broadcast(torch.ones(3), src=world)
    elif case == "gather_list":
        minidp.comm.all_gather([torch.empty(3)], torch.ones(3))
    elif case == "list":
        all_reduce([1.0, 2.0])
    elif case == "leaf":
        all_reduce(torch.ones(3, requires_grad=True))
    elif case == "meta":
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)  # gloo's C++ abort message would scribble over the progress
        all_reduce(torch.ones(3, device="meta"))


def _local(case):
    if case == "dp_empty_batch":
        minidp.DataParallel(nn.Linear(6, 3), device_ids=["cpu"] * 2)(torch.empty(0, 6))
    elif case == "dp_zero_dim":
        minidp.DataParallel(nn.Identity(), device_ids=["cpu"] * 2)(torch.tensor(3.0))
    elif case == "ddp_frozen":
        minidp.DistributedDataParallel(nn.Linear(2, 2).requires_grad_(False))
    elif case == "no_group":
        all_reduce(torch.ones(2))


# ---- the rows ---------------------------------------------------------------------------


def like_torch(results: list) -> str:
    return "no error (like torch)"


DETAIL = {"MINIDP_DEBUG": "DETAIL"}
FAULTS = [
    # -- a rank fails
    Fault("fault", "rank exits (os._exit(3)) at DDP step 2", "processes", 2, _train_until,
          (1, "exits"), r"rank 1 exited with code 3"),
    Fault("fault", "rank spins in Python, peer in all_reduce", "processes", 2, _spins,
          (), r"rank 0 raised CollectiveTimeout: .*waiting to recv from rank 1",
          stall=True),
    Fault("fault", "every rank spins in Python, run(timeout=2)", "processes", 2, _all_spin,
          (), r"still running at the 2s deadline", run_timeout=2.0, stall=True),
    Fault("fault", "rank runs out of data (DDP, no join)", "processes", 2, _train_until,
          (0, "returns_early"), r"rank 1 raised CollectiveTimeout: .* rank 0\b", stall=True),
    Fault("fault", "rank raises in a DDP step, thread world", "threads", 3, _train_until,
          (2, "raises"), r"rank 2 raised ValueError: bad batch"),
    # -- desynchronised ranks
    Fault("desync", "rank skipped a collective, MINIDP_DEBUG=DETAIL", "processes", 2,
          _skipped, (), r"MismatchError: all_reduce \(checked mode\): (ranks are out of step|"
          r".*different lines)",
          env=DETAIL),
    Fault("desync", "same numel, other shape, MINIDP_DEBUG=DETAIL", "processes", 2,
          _reshaped, (), r"MismatchError: .*shape \(3, 2\).*shape \(2, 3\)", env=DETAIL),
    Fault("desync", "checked mode on rank 0 only", "processes", 2, _mixed, (),
          r"MismatchError: all_reduce: checked mode is on for ranks \[0\] only"),
    Fault("desync", "numel 12 vs 10", "threads", 2, _mismatch, ("numel",),
          r"MismatchError: .*rank 1 passed \[all_reduce, shape \(10,\)"),
    Fault("desync", "dtype float32 vs float64", "threads", 2, _mismatch, ("dtype",),
          r"MismatchError: .*float64.*float32"),
    Fault("desync", "broadcast vs all_reduce", "threads", 2, _mismatch, ("kind",),
          r"MismatchError: .*\[broadcast.*\[all_reduce"),
    Fault("desync", "DDP: 6 vs 8 parameters", "threads", 2, _ddp_differs, ("parameters",),
          r"RuntimeError: .*rank 1 has 8 parameters .* rank 0 has 6"),
    Fault("desync", "DDP: Linear(16, 8) vs Linear(16, 9)", "threads", 2, _ddp_differs,
          ("shapes",), r"RuntimeError: .*has shape \(9, 16\) float32 on rank 1"),
    Fault("desync", "DDP: other bucket_cap_mb (find_unused)", "threads", 2, _ddp_differs,
          ("buckets",), r"RuntimeError: .*expected the same buckets on every rank"),
    Fault("desync", "DDP: find_unused_parameters on rank 1 only", "threads", 2, _ddp_differs,
          ("find_unused",), r"RuntimeError: .*rank 1 has find_unused_parameters=True while"),
    # -- bad input
    Fault("bad input", "all_reduce avg of int64", "threads", 2, _bad_input, ("int_avg",),
          r"TypeError: (ring|direct)_all_reduce: op 'avg' needs a floating-point tensor"),
    Fault("bad input", "all_reduce of bool", "threads", 2, _bad_input, ("bool",),
          r"TypeError: (ring|direct)_all_reduce: dtype torch.bool is not supported"),
    Fault("bad input", "op='median'", "threads", 2, _bad_input, ("op",),
          r"ValueError: (ring|direct)_all_reduce: unsupported op 'median'"),
    Fault("bad input", "broadcast src=2 in a group of 2", "threads", 2, _bad_input, ("src",),
          r"ValueError: broadcast: src must be a rank in \[0, 1\]"),
    Fault("bad input", "all_gather list of 1 for 2 ranks", "threads", 2, _bad_input,
          ("gather_list",), r"ValueError: all_gather: tensor_list has 1 tensors"),
    Fault("bad input", "a Python list instead of a tensor", "threads", 2, _bad_input,
          ("list",), r"TypeError: .*expected a torch\.Tensor"),
    Fault("bad input", "leaf tensor with requires_grad (torch accepts)", "threads", 2,
          _bad_input, ("leaf",), r"^$", on_success=like_torch),
    Fault("bad input", "tensor on the meta device", "processes", 2, _bad_input, ("meta",),
          r"(TypeError|ValueError|RuntimeError): .*meta"),
    Fault("bad input", "DataParallel: empty batch", "local", 0, _local, ("dp_empty_batch",),
          r"ValueError: .*empty batch"),
    Fault("bad input", "DataParallel: 0-dim input", "local", 0, _local, ("dp_zero_dim",),
          r"ValueError: .*cannot split a 0-dim tensor"),
    Fault("bad input", "DDP of a frozen module", "local", 0, _local, ("ddp_frozen",),
          r"RuntimeError: .*no parameter that requires a gradient"),
    Fault("bad input", "collective without a process group", "local", 0, _local,
          ("no_group",), r"RuntimeError: minidp.comm: no process group"),
]  # fmt: skip
