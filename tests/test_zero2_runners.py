"""Rank-side runners for the ZeRO-2 training-loop tests (no tests here).

Functions sent to rank processes must be module-level and importable there, so they live
in a module of their own, like ``test_zero_support.py``. Each compares minidp's
``Zero2Optimizer`` with torch DDP + torch's ``ZeroRedundancyOptimizer`` (and FSDP2 where
asked) on the same data, and returns the max |diff| of the parameters after every step
(0.0: every parameter ``torch.equal``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
from test_zero_support import OPTIMIZERS, TinyLM, batch, loss_of, max_diff, state_diffs

CAP = 0.0005  # MiB: three buckets for TinyLM, so the bucket hand-off is exercised


def _torch_pair(base: nn.Module, cls, kw) -> tuple:
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

    ref = nn.parallel.DistributedDataParallel(copy.deepcopy(base))
    return ref, TorchZero(ref.parameters(), cls, **kw)


def _ours(base: nn.Module, cls, kw) -> tuple:
    from minidp.zero import Zero2Optimizer

    model = copy.deepcopy(base)
    return model, Zero2Optimizer(model.parameters(), cls, bucket_cap_mb=CAP, **kw)


def accumulation(rank: int, world: int, with_fsdp2: bool, steps: int = 3) -> dict:
    """Two backwards (no zero_grad between), then step: minidp vs three torch references.

    * ``ddp``: torch DDP + ZeRO doing the same two backwards. DDP adds the second local
      gradient to the *already averaged* first one and averages that again, so it rounds
      differently: a few ulps, not bits.
    * ``ddp_summed``: torch DDP averages each micro-batch, the two averages are added —
      what minidp (and FSDP2) compute, bit for bit at 2 ranks.
    * ``fsdp2``: ``fully_shard(reshard_after_forward=False)``, which adds each backward's
      reduce-scattered shard to the last one, like minidp.
    """
    cls, kw = OPTIMIZERS["adamw"]
    torch.manual_seed(0)  # FSDP2 does not broadcast: every rank starts from the same weights
    base = TinyLM()
    ours, opt = _ours(base, cls, kw)
    ref, topt = _torch_pair(base, cls, kw)
    summed, sopt = _torch_pair(base, cls, kw)
    fsdp = None
    if with_fsdp2:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        fmodel = fully_shard(copy.deepcopy(base), mesh=mesh, reshard_after_forward=False)
        fsdp = (fmodel, cls(fmodel.parameters(), **kw))
    out = {"ddp": [], "ddp_summed": [], "fsdp2": []}
    for step in range(steps):
        micro = [batch(rank, 2 * step), batch(rank, 2 * step + 1)]
        for model, o in [(ours, opt), (ref, topt)] + ([fsdp] if fsdp else []):
            o.zero_grad()
            for x, y in micro:
                loss_of(model, x, y).backward()
            o.step()
        sopt.zero_grad()
        per_micro = []
        for x, y in micro:
            for p in summed.parameters():
                p.grad = None
            loss_of(summed, x, y).backward()
            per_micro.append([p.grad for p in summed.parameters()])
        for p, g1, g2 in zip(summed.parameters(), *per_micro):
            p.grad = None if g1 is None else g1 + g2
        sopt.step()
        out["ddp"].append(max_diff(ours, ref.module))
        out["ddp_summed"].append(max_diff(ours, summed.module))
        if fsdp:
            full = nn.ParameterList([p.full_tensor() for p in fsdp[0].parameters()])
            out["fsdp2"].append(max_diff(nn.ParameterList(ours.parameters()), full))
    return out


def schedules() -> dict:
    """The LR schedules tested (built on an optimizer)."""
    return {
        "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
        "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)),
    }


def scheduled(rank: int, world: int, name: str, steps: int = 5) -> dict:
    """minidp ZeRO-2 + an LR scheduler vs torch DDP + ZeRO + the same scheduler."""
    import warnings

    cls, kw = OPTIMIZERS["adamw"]
    torch.manual_seed(rank)  # ranks start different: rank 0's weights must win
    base = TinyLM()
    ours, opt = _ours(base, cls, kw)
    ref, topt = _torch_pair(base, cls, kw)
    make = schedules()[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sched, tsched = make(opt), make(topt)
        diffs, lrs = [], []
        for step in range(steps):
            x, y = batch(rank, step)
            for model, o, s in ((ours, opt, sched), (ref, topt, tsched)):
                o.zero_grad()
                loss_of(model, x, y).backward()
                o.step()
                s.step()
            diffs.append(max_diff(ours, ref.module))
            lrs.append((opt.optim.param_groups[0]["lr"], topt.optim.param_groups[0]["lr"]))
    return {"diffs": diffs, "lrs": lrs, "warnings": [str(w.message) for w in caught]}


def save(rank: int, world: int, steps: int = 2, more: int = 2) -> dict:
    """Train ``steps`` steps beside torch, checkpoint both, then go on ``more`` steps."""
    cls, kw = OPTIMIZERS["adamw"]
    torch.manual_seed(rank)
    base = TinyLM()
    ours, opt = _ours(base, cls, kw)
    ref, topt = _torch_pair(base, cls, kw)

    def train(begin: int, end: int) -> list:
        out = []
        for step in range(begin, end):
            x, y = batch(rank, step)
            for model, o in ((ours, opt), (ref, topt)):
                o.zero_grad()
                loss_of(model, x, y).backward()
                o.step()
            out.append(max_diff(ours, ref.module))
        return out

    before = train(0, steps)
    opt.consolidate_state_dict(to=0)
    topt.consolidate_state_dict(to=0)
    sd = versus = None
    if rank == 0:  # compared now: torch's state dict holds its live state tensors
        sd = copy.deepcopy(opt.state_dict())
        tsd = topt.state_dict()
        versus = {"keys": state_diffs(sd, tsd), "max": _max_state_diff(sd, tsd)}
    weights = copy.deepcopy(ours.state_dict())
    train(steps, steps + more)  # the run that never stopped
    return {
        "before": before,
        "sd": sd,
        "state_vs_torch": versus,
        "weights": weights,
        "uninterrupted": copy.deepcopy(ours.state_dict()),
    }


def _max_state_diff(sa: dict, sb: dict) -> float:
    """Largest |difference| between two state dicts' tensors (same indices and keys)."""
    worst = 0.0
    for i, state in sa["state"].items():
        for key, x in state.items():
            y = sb["state"][i][key]
            if torch.is_tensor(x) and not torch.equal(x, y):
                worst = max(worst, float((x - y).abs().max()), 1e-45)
    return worst


def resume(rank: int, world: int, sd: dict, weights: dict, first: int, more: int = 2) -> dict:
    """Load one checkpoint into minidp ZeRO-2 and into torch DDP + ZeRO; train both on."""
    cls, kw = OPTIMIZERS["adamw"]
    base = TinyLM()
    base.load_state_dict(weights)
    ours, opt = _ours(base, cls, kw)
    ref, topt = _torch_pair(base, cls, kw)
    opt.load_state_dict(sd)
    topt.load_state_dict(copy.deepcopy(sd))  # torch's ZeRO reads minidp's checkpoint as is
    diffs = []
    for step in range(first, first + more):
        x, y = batch(rank, step)
        for model, o in ((ours, opt), (ref, topt)):
            o.zero_grad()
            loss_of(model, x, y).backward()
            o.step()
        diffs.append(max_diff(ours, ref.module))
    return {"diffs": diffs, "weights": copy.deepcopy(ours.state_dict())}


class Odd(nn.Module):
    """Trains with torch, but once crashed minidp: a zero-element layer and a transposed weight."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 5)
        self.empty = nn.Linear(4, 0)  # weight (0, 4), bias (0,)
        self.t = nn.Parameter(torch.randn(3, 5).t())  # (5, 3), strides (1, 5): non-contiguous
        self.scale = nn.Parameter(torch.tensor(1.5))  # 0-d: one row

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc(x)) @ self.t * self.scale
        return h.pow(2).mean() + self.empty(x).sum()


def odd_params(rank: int, world: int, steps: int = 3) -> dict:
    """``Odd`` with minidp ZeRO-2 vs torch DDP + ZeRO, SGD with momentum and AdamW."""
    out = {}
    for name in ("sgd_momentum", "adamw"):
        cls, kw = OPTIMIZERS[name]
        torch.manual_seed(rank)
        base = Odd()
        ours, opt = _ours(base, cls, kw)
        ref, topt = _torch_pair(base, cls, kw)
        diffs = []
        for step in range(steps):
            x = torch.randn(6, 4, generator=torch.Generator().manual_seed(10 * step + rank))
            for model, o in ((ours, opt), (ref, topt)):
                o.zero_grad()
                model(x).backward()
                o.step()
            diffs.append(max_diff(ours, ref.module))
        out[name] = {"diffs": diffs, "contiguous": ours.t.is_contiguous()}
    return out


def torch_ddp_refused(rank: int, world: int, ddp_first: bool) -> str:
    """torch DDP and minidp ZeRO-2 on one model: the error message (caught: the world lives)."""
    from minidp.zero import Zero2Optimizer

    torch.manual_seed(0)
    net = TinyLM()
    try:
        if ddp_first:
            model = nn.parallel.DistributedDataParallel(net)
            opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)
        else:
            opt = Zero2Optimizer(net.parameters(), torch.optim.SGD, lr=0.1)
            model = nn.parallel.DistributedDataParallel(net)
        loss_of(model, *batch(rank, 0)).backward()
        opt.step()
    except RuntimeError as err:
        return str(err)
    return "no error"
