"""ZeRO-1 takes torch's whole interface: constructor arguments, ``step(**kwargs)``, schedulers.

Each behaviour is measured against ``torch.distributed.optim.ZeroRedundancyOptimizer`` on
the same call: the argument errors raise the same exception type as torch's (checked on
torch too); in 2-rank gloo processes, minidp's optimizer and torch's train the same
seeded model on the same data, and after every step every parameter must be
``torch.equal``:

* ``step(scale=...)``: extra keyword arguments reach the local optimizer (with and
  without a closure), and ``parameters_as_bucket_view=False, overlap_with_ddp=False``
  stay out of the local optimizer's options;
* an LR scheduler (``StepLR``, ``LambdaLR``) changes the lr the local optimizer uses;
* ``parameters_as_bucket_view=True`` with DDP, and without DDP through a parameter group
  added and a parameter frozen mid-training (both rebuild the buckets).

Run: ``pytest tests/test_zero1_interface.py``
"""

from __future__ import annotations

import copy
import inspect
import re

import pytest
import torch
import torch.nn as nn
from test_zero_support import TinyLM, batch, diffs, loss_of
from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

import minidp
from minidp.zero.checks import GLOO_REFUSAL

STEPS = 5


class ScaledSGD(torch.optim.SGD):
    """SGD whose ``step`` takes one more keyword: scale the gradients first."""

    def step(self, closure=None, scale: float = 1.0):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.mul_(scale)
        super().step()
        return loss


# ---- arguments: checked before any communication, so no group is needed --------------------


def test_signature_is_torchs():
    def shape(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    assert shape(minidp.ZeroRedundancyOptimizer.__init__) == shape(TorchZero.__init__)
    assert shape(minidp.ZeroRedundancyOptimizer.step) == shape(TorchZero.step)


@pytest.mark.parametrize(
    "params, pattern",
    [
        (torch.randn(1), r"got a single torch.FloatTensor of shape \(1,\)\. Hint: wrap it"),
        (torch.randn(3, 2), r"got a single torch.FloatTensor of shape \(3, 2\)\. Hint: wrap it"),
        (3, r"got int, which is not iterable\. Hint: pass model.parameters\(\)"),
        (
            [torch.zeros(2), {"params": [torch.zeros(2)]}],
            r"all tensors or all parameter-group dicts, got 1 dicts and 1 other.*Hint",
        ),
    ],
    ids=["bare_0d_split", "bare_2d", "not_iterable", "mixed"],
)
def test_bad_params_raise_typeerror_like_torch(params, pattern):
    with pytest.raises(TypeError):  # torch refuses the same call with the same type
        TorchZero(params, torch.optim.SGD, lr=0.1)
    with pytest.raises(TypeError, match=r"ZeroRedundancyOptimizer: expected params .*" + pattern):
        minidp.ZeroRedundancyOptimizer(params, torch.optim.SGD, lr=0.1)


def test_overlap_with_ddp_is_refused_clearly():
    """Without a torch group (here: none at all) minidp's collectives run gloo-like: torch's
    gloo refusal (tests/test_zero1_resize.py compares it with torch's own)."""
    # torch's words differ by release (2.9 named gloo): checks.GLOO_REFUSAL is this one's
    refusal = re.escape(GLOO_REFUSAL) + r" \(.*Hint: .*Zero2Optimizer"
    with pytest.raises(RuntimeError, match=refusal):
        minidp.ZeroRedundancyOptimizer(
            nn.Linear(2, 2).parameters(), torch.optim.SGD, overlap_with_ddp=True, lr=0.1
        )


# ---- in 2 rank processes, against torch --------------------------------------------------------


def _pair(rank: int, ddp: bool):
    """Two identical models (DDP-wrapped, or plain and seeded alike on every rank)."""
    torch.manual_seed(rank if ddp else 0)  # DDP must broadcast rank 0's weights
    base = TinyLM()
    if not ddp:
        return copy.deepcopy(base), copy.deepcopy(base)
    return (
        minidp.DistributedDataParallel(copy.deepcopy(base)),
        nn.parallel.DistributedDataParallel(copy.deepcopy(base)),
    )


def _step_kwargs(rank: int) -> dict:
    ours, ref = _pair(rank, ddp=True)
    args = {"parameters_as_bucket_view": False, "overlap_with_ddp": False, "lr": 0.1}
    opt = minidp.ZeroRedundancyOptimizer(ours.parameters(), ScaledSGD, **args, momentum=0.9)
    topt = TorchZero(ref.parameters(), ScaledSGD, **args, momentum=0.9)
    out = {"defaults": (opt.defaults, topt.defaults), "per_step": [], "losses": []}
    out["local"] = (opt.optim.defaults, topt.optim.defaults)
    for step in range(STEPS):
        x, y = batch(rank, step)
        losses = []
        for model, o in ((ours, opt), (ref, topt)):

            def closure(model=model, o=o, x=x, y=y):
                o.zero_grad()
                loss = loss_of(model, x, y)
                loss.backward()
                return loss

            if step % 2:  # with a closure, passed on as closure=..., plus the keyword
                losses.append(o.step(closure, scale=0.5 + 0.25 * step))
            else:
                closure()
                losses.append(o.step(scale=0.5 + 0.25 * step))
        out["losses"].append(
            losses[0] is None if losses[1] is None else torch.equal(losses[0], losses[1])
        )
        out["per_step"].append(diffs(ours, ref))
    return out


SCHEDULERS = {
    "step_lr": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3),
    "lambda_lr": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)),
}


def _scheduled(rank: int, name: str) -> dict:
    ours, ref = _pair(rank, ddp=True)
    opt = minidp.ZeroRedundancyOptimizer(ours.parameters(), torch.optim.AdamW, lr=0.05)
    topt = TorchZero(ref.parameters(), torch.optim.AdamW, lr=0.05)
    scheds = [SCHEDULERS[name](o) for o in (opt, topt)]
    out = {"per_step": [], "lr": []}
    for step in range(STEPS):
        x, y = batch(rank, step)
        for (model, o), sched in zip(((ours, opt), (ref, topt)), scheds):
            o.zero_grad()
            loss_of(model, x, y).backward()
            o.step()
            sched.step()
        out["per_step"].append(diffs(ours, ref))
        # the wrapper's lr and the local optimizer's lr, on both sides
        sides = (opt, topt, opt.optim, topt.optim)
        out["lr"].append([[g["lr"] for g in o.param_groups] for o in sides])
    return out


def _bucket_view(rank: int, ddp: bool) -> dict:
    """Bucket views vs torch's, with DDP; or without, through add_param_group and a freeze."""
    ours, ref = _pair(rank, ddp)

    def pick(model) -> list:  # without DDP, fc2 comes later, with add_param_group
        return [p for n, p in model.named_parameters() if ddp or not n.startswith("fc2")]

    kw = {"parameters_as_bucket_view": True, "lr": 0.05, "weight_decay": 0.1}
    opt = minidp.ZeroRedundancyOptimizer(pick(ours), torch.optim.AdamW, **kw)
    topt = TorchZero(pick(ref), torch.optim.AdamW, **kw)
    out = {"per_step": [], "aliased": []}
    for step in range(STEPS + 1):
        if not ddp and step == 2:  # a new group: its parameters join the buckets
            for model, o in ((ours, opt), (ref, topt)):
                o.add_param_group({"params": list(model.fc2.parameters()), "lr": 0.02})
            out["aliased"].append(_owners_alias_one_tensor(opt))  # at once, before a step
        if not ddp and step == 4:  # a frozen parameter leaves its bucket
            for model in (ours, ref):
                model.fc1.bias.requires_grad_(False)
        x, y = batch(rank, step)
        for model, o in ((ours, opt), (ref, topt)):
            o.zero_grad()
            loss_of(model, x, y).backward()
            o.step()
        out["per_step"].append(diffs(ours, ref))
        out["aliased"].append(_owners_alias_one_tensor(opt))
    return out


def _owners_alias_one_tensor(opt) -> bool:
    """Every owner's trainable parameters share one storage, a different one per owner;
    a frozen parameter shares none of them (it left its bucket, as in torch)."""
    ptrs, frozen = [], set()
    for owner in range(opt.world_size):
        params = opt.owned_parameters(owner)
        ptrs.append({p.untyped_storage().data_ptr() for p in params if p.requires_grad})
        frozen |= {p.untyped_storage().data_ptr() for p in params if not p.requires_grad}
    buckets = set().union(*ptrs)
    return all(len(s) == 1 for s in ptrs) and len(buckets) == len(ptrs) and not frozen & buckets


def run_interface(rank: int, world: int) -> dict:
    return {
        "step_kwargs": _step_kwargs(rank),
        **{f"sched_{name}": _scheduled(rank, name) for name in SCHEDULERS},
        "bucket_ddp": _bucket_view(rank, ddp=True),
        "bucket_rebuild": _bucket_view(rank, ddp=False),
    }


@pytest.fixture(scope="module")
def results(process_world):
    return process_world(2).run(run_interface)


def test_step_kwargs_reach_the_local_optimizer_like_torch(results):
    for rank, res in enumerate(results):
        r = res["step_kwargs"]
        assert all(d == [] for d in r["per_step"]), f"rank {rank}: {r['per_step']}"
        assert all(r["losses"]), f"rank {rank}: closure losses differ: {r['losses']}"
        assert r["defaults"][0] == r["defaults"][1], r["defaults"]
        assert r["local"][0] == r["local"][1], r["local"]  # no wrapper argument leaked in
        assert "parameters_as_bucket_view" not in r["local"][0]


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_lr_scheduler_reaches_the_local_optimizer_like_torch(results, name):
    for rank, res in enumerate(results):
        r = res[f"sched_{name}"]
        assert all(d == [] for d in r["per_step"]), f"rank {rank}: {r['per_step']}"
        for ours, theirs, local, their_local in r["lr"]:
            assert (ours, local) == (theirs, their_local), (ours, theirs, local, their_local)
        assert len({tuple(x[0]) for x in r["lr"]}) > 1, "the scheduler never changed the lr"


@pytest.mark.parametrize("case", ["bucket_ddp", "bucket_rebuild"])
def test_parameters_as_bucket_view_matches_torch(results, case):
    for rank, res in enumerate(results):
        r = res[case]
        assert all(d == [] for d in r["per_step"]), f"rank {rank}: {r['per_step']}"
        assert all(r["aliased"]), f"rank {rank}: parameters are not bucket views {r['aliased']}"
