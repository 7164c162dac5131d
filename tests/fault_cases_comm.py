"""The collectives' and DDP's rows of the fault catalog, from the second reliability round:
user collectives inside DDP's backward, subgroup ranks, a mistyped ``MINIDP_DEBUG``,
expanded tensors, complex parameters, mismatched buffers, a rank that changed directory,
NaN under ``max``.

Run: ``pytest -m slow tests/test_fault_catalog.py -k "comm or DDP"``.

Rows whose right answer is a result check it against gloo (the same call on the same
inputs) or against a property torch guarantees (DDP: the same gradients every step). The
same behaviours are tested against torch in ``tests/test_collectives.py``,
``tests/test_ddp*.py`` and ``tests/test_faults.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
from fault_cases import like_torch
from fault_runner import Fault
from fault_scripts import ScriptFailed, subprocess_env
from torch import nn

import minidp
from minidp.comm import all_reduce
from minidp.comm import group as groups

# ---- rank functions -------------------------------------------------------------------


class _SumAcrossRanks(torch.autograd.Function):
    """Identity forward; backward all-reduces the gradient (a model-parallel layer's)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        all_reduce(grad)
        return grad


class _MiddleSum(nn.Sequential):
    """Layers with the all-reducing identity in the middle: its backward runs while DDP
    already all-reduces the last layers' buckets."""

    def forward(self, x):
        first, *rest = self
        x = _SumAcrossRanks.apply(first(x))
        for layer in rest:
            x = layer(x)
        return x


def _collective_in_backward(rank, world):
    """Gradients of 4 identical DDP steps: torch DDP gives the same ones every step (once
    the buckets are rebuilt), on every rank."""
    g = torch.Generator().manual_seed(0)
    model = _MiddleSum(nn.Linear(16, 64), nn.Linear(64, 64), nn.Linear(64, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    ddp = minidp.DistributedDataParallel(model, bucket_cap_mb=0.01)  # several buckets
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))
    steps = []
    for _ in range(4):
        ddp.zero_grad()
        ddp(x).square().sum().backward()
        steps.append(torch.cat([p.grad.flatten() for p in ddp.parameters()]))
    # from step 2 on: the first step runs before the bucket rebuild, and at 3 ranks another
    # bucket layout may sum in another order (torch's DDP too)
    return all(torch.equal(s, steps[1]) for s in steps[1:]), steps[1]


def _same_every_step(results: list) -> str:
    steady = all(ok for ok, _ in results)
    agree = all(torch.equal(grads, results[0][1]) for _, grads in results)
    if steady and agree:
        return "no error (like torch)"
    return f"no error, WRONG RESULT: same every step {steady}, same on every rank {agree}"


def _subgroup_broadcast(rank, world):
    """Subgroup [1, 2], broadcast(src=1): src is a global rank; rank 0 is not a member."""
    sub = dist.new_group([1, 2])
    t = torch.tensor([10.0 * rank])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        minidp.comm.broadcast(t, src=1, group=sub)
    return float(t), any("does not belong to the given group" in str(w.message) for w in caught)


def _subgroup_verdict(results: list) -> str:
    if results == [(0.0, True), (10.0, False), (10.0, False)]:
        return "no error (like torch)"
    return f"no error, WRONG RESULT: {results} (right: rank 0 warned, ranks 1, 2 hold 10)"


def _like_gloo(rank, world, case):
    """minidp's all_reduce and gloo's on the same inputs; returns whether they agree."""
    pg = groups.resolve()
    if case == "expanded":  # stride 0: one memory location seen 4 times
        make, op = (lambda: torch.tensor([1.0 + rank]).expand(4)), "sum"
    else:  # a NaN on each rank, in another element: gloo keeps the lower rank's value
        nan = float("nan")
        make, op = (lambda: torch.tensor([nan, 1.0] if rank == 0 else [1.0, nan])), "max"
    ours, ref = make(), make()
    all_reduce(ours, op)
    opts = dist.AllreduceOptions()
    opts.reduceOp = getattr(dist.ReduceOp, op.upper())
    pg.allreduce([ref], opts).wait()
    return (
        torch.equal(ours.isnan(), ref.isnan()) and torch.equal(ours.nan_to_num(), ref.nan_to_num()),
        ours.tolist(),
        ref.tolist(),
    )


def _gloo_verdict(results: list) -> str:
    if all(same for same, _, _ in results):
        return "no error (like torch)"
    return f"no error, DIFFERS FROM GLOO: minidp {results[0][1]}, gloo {results[0][2]}"


def _ddp_model_differs(rank, world, case):
    if case == "complex":
        minidp.DistributedDataParallel(nn.Linear(2, 2).to(torch.complex64))
    elif case == "buffer":
        model = nn.Linear(4, 4)
        model.register_buffer("running_scale", torch.ones(3 if rank == 0 else 4))
        minidp.DistributedDataParallel(model)


def _chdir_then_checked(rank, world):
    """Checked mode on; rank 1 works in another directory (call sites must still agree)."""
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        if rank == 1:
            os.chdir(tmp)
        t = torch.ones(3)
        all_reduce(t)
        os.chdir(home)
    return float(t[0])


def _debug_typo(value: str) -> None:
    """Import minidp in a fresh interpreter with MINIDP_DEBUG set to ``value``."""
    env = dict(subprocess_env(), MINIDP_DEBUG=value)
    out = subprocess.run(
        [sys.executable, "-c", "import minidp"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if out.returncode != 0:
        raise ScriptFailed(f"exit {out.returncode}", out.stderr.strip().splitlines()[-1])


# ---- the rows -------------------------------------------------------------------------

DETAIL = {"MINIDP_DEBUG": "DETAIL"}
COMM_FAULTS = [
    Fault("desync", "comm: all_reduce inside DDP's backward (autograd.Function)", "threads",
          2, _collective_in_backward, (), r"^$", on_success=_same_every_step),
    Fault("desync", "comm: all_reduce inside DDP's backward, 3 processes", "processes", 3,
          _collective_in_backward, (), r"^$", on_success=_same_every_step),
    Fault("bad input", "comm: broadcast(src=1) on subgroup [1, 2]; rank 0 outside", "processes",
          3, _subgroup_broadcast, (), r"^$", on_success=_subgroup_verdict),
    *[Fault("bad input", f"comm: MINIDP_DEBUG={value!r} (typo)", "local", 0, _debug_typo,
            (value,), r"ValueError: MINIDP_DEBUG must be one of OFF, INFO, DETAIL")
      for value in ("DETAILS", " DETAIL", "1")],
    Fault("bad input", "comm: all_reduce of an expanded (stride-0) tensor", "threads", 2,
          _like_gloo, ("expanded",), r"^$", on_success=_gloo_verdict),
    Fault("bad input", "comm: all_reduce max, a NaN in another element per rank", "threads", 2,
          _like_gloo, ("nan",), r"^$", on_success=_gloo_verdict),
    Fault("desync", "comm: checked mode, rank 1 in another directory", "processes", 2,
          _chdir_then_checked, (), r"^$", env=DETAIL, on_success=like_torch),
    Fault("bad input", "DDP: complex parameters", "threads", 2, _ddp_model_differs,
          ("complex",), r"ValueError: DistributedDataParallel: parameter 'weight' is "
          r"torch.complex64"),
    Fault("desync", "DDP: a buffer's shape differs across ranks", "threads", 2,
          _ddp_model_differs, ("buffer",), r"RuntimeError: .*buffer 'running_scale' has "
          r"shape"),
]  # fmt: skip
