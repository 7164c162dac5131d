"""Rank-side runners for ``tests/test_fsdp_dtensor.py`` (no tests here): torch's own APIs on a
minidp-sharded model beside FSDP2's, the same seeded ``TinyLM``, the same data.

Each returns plain values (they pickle): losses, ``(step, tensor, what, max |diff|)`` rows
like ``fsdp_scenarios._compare``'s, or ``(outcome, value)`` pairs. Module-level functions,
so rank processes can import them.
"""

from __future__ import annotations

import io

import torch
from fsdp_scenarios import _compare, _local
from test_fsdp_support import TinyLM, batches, diff, loss_fn, make_optimizer, wrap

import minidp


def _fsdp2(mesh):
    from torch.distributed.fsdp import fully_shard

    return lambda m, **kw: fully_shard(m, mesh=mesh, **kw)


def _pair(world: int, meta: bool = False, reshard=True):
    """(FSDP2's model, minidp's): equal weights (or both on meta), each block then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    torch.manual_seed(0)
    reference = TinyLM()
    with torch.device("meta" if meta else "cpu"):
        theirs, ours = TinyLM(), TinyLM()
    if not meta:
        theirs.load_state_dict(reference.state_dict())
        ours.load_state_dict(reference.state_dict())
    mesh = init_device_mesh("cpu", (world,))
    wrap(theirs, _fsdp2(mesh), reshard, MixedPrecisionPolicy())  # (None: FSDP2's unshard fails)
    wrap(ours, minidp.fully_shard, reshard, minidp.MixedPrecisionPolicy())
    return theirs, ours


def _reset(model) -> None:
    torch.manual_seed(1)  # the same draws on both sides (DTensor's CPU RNG: this rank's)
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()


def _train(rank, models_and_opts, steps=3, before_forward=None) -> list[list[float]]:
    losses = [[] for _ in models_and_opts]
    for tokens, target in batches(rank, steps):
        for i, (model, opt) in enumerate(models_and_opts):
            if before_forward is not None:
                before_forward(model)
            loss = loss_fn(model, tokens, target)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[i].append(loss.item())
    return losses


def meta_recipe(rank: int, world: int, variant: str) -> dict:
    """FSDP2's meta-device recipe on both: ``fully_shard`` -> ``to_empty`` ->
    ``reset_parameters`` -> optimizer -> train. Variants: "opt_first" (the optimizer built
    right after wrapping, before ``to_empty``), "unshard_first" (``model.unshard()`` and an
    inner unit's ``unshard()`` before the first forward, every step)."""
    theirs, ours = _pair(world, meta=True)
    opts = []
    for model in (theirs, ours):
        if variant == "opt_first":
            opts.append(make_optimizer("adamw", model.parameters()))
        model.to_empty(device="cpu")
        _reset(model)
        if variant != "opt_first":
            opts.append(make_optimizer("adamw", model.parameters()))

    def unshard(model):
        model.blocks[1].unshard()
        model.unshard()

    hook = unshard if variant == "unshard_first" else None
    losses = _train(rank, list(zip((theirs, ours), opts)), before_forward=hook)
    return {"losses": losses, "rows": _compare(3, theirs, ours)}


def torch_apis(rank: int, world: int) -> dict:
    """Trained 2 steps; then torch's APIs on both: {check: rows or values}."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    theirs, ours = _pair(world)
    opts = [make_optimizer("adamw", m.parameters()) for m in (theirs, ours)]
    _train(rank, list(zip((theirs, ours), opts)), steps=2)
    full = StateDictOptions(full_state_dict=True)
    out = {"rows": []}
    for what, options in (("full", full), ("sharded", None)):
        sds = [get_model_state_dict(m, options=options) for m in (theirs, ours)]
        out["rows"] += [
            (what, k, type(v).__name__, diff(_local(sds[1][k]), _local(v)))
            for k, v in sds[0].items()
        ]
        osds = [
            get_optimizer_state_dict(m, o, options=options) for m, o in zip((theirs, ours), opts)
        ]
        out["rows"] += [
            (what, n, k, diff(_local(osds[1]["state"][n][k]), _local(v)))
            for n, e in osds[0]["state"].items()
            for k, v in e.items()
        ]
        out[f"{what} groups"] = osds[0]["param_groups"] == osds[1]["param_groups"]
    out["full shape"] = tuple(get_model_state_dict(ours, options=full)["emb.weight"].shape)
    out["isinstance"] = [isinstance(m, minidp.fsdp.FSDPModule) for m in (ours, ours.blocks[0])]
    mine = dict(ours.named_parameters())
    out["placements"] = all(
        p.placements == mine[n].placements for n, p in theirs.named_parameters()
    )
    out["rows"] += [
        ("full_tensor", n, "param", diff(mine[n].full_tensor(), p.full_tensor()))
        for n, p in theirs.named_parameters()
    ]
    tokens, target = batches(rank + 5, 1)[0]
    norms = []
    for model in (theirs, ours):
        loss_fn(model, tokens, target).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1).full_tensor())
    out["rows"].append(("clip", "total norm", "norm", diff(norms[1], norms[0])))
    out["rows"] += _compare(2, theirs, ours)
    return out


def gathered_save(rank: int, world: int) -> list[tuple]:
    """``set_reshard_after_backward(False)``: the units stay gathered after backward; torch's
    ``get_model_state_dict`` (full and sharded) then, on both, and one more step."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    theirs, ours = _pair(world)
    opts = [make_optimizer("adamw", m.parameters()) for m in (theirs, ours)]
    rows = []
    tokens, target = batches(rank, 1)[0]
    for model in (theirs, ours):
        model.set_reshard_after_backward(False)
        loss_fn(model, tokens, target).backward()
    for options in (StateDictOptions(full_state_dict=True), None):
        sds = [get_model_state_dict(m, options=options) for m in (theirs, ours)]
        rows += [(0, k, "state", diff(_local(sds[1][k]), _local(v))) for k, v in sds[0].items()]
    for opt in opts:
        opt.step()
    return rows + _compare(0, theirs, ours)


def reshard_none(rank: int, world: int) -> list[tuple]:
    """``reshard_after_forward=None`` (2.13's documented default) on both, 3 steps."""
    theirs, ours = _pair(world, reshard=None)
    opts = [make_optimizer("adamw", m.parameters()) for m in (theirs, ours)]
    _train(rank, list(zip((theirs, ours), opts)))
    return _compare(3, theirs, ours)


class LARS(torch.optim.Optimizer):
    """A LARS-style SGD: each step scaled by the trust ratio ||p|| / ||g|| of the tensor."""

    def __init__(self, params, lr=0.1):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    trust = p.norm() / (p.grad.norm() + 1e-12)
                    p.add_(p.grad * trust, alpha=-group["lr"])


def _outcome(fn):
    try:
        value = fn()
    except Exception as e:  # noqa: BLE001 — compared by type and first line
        return ("error", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return ("ok", value)


def not_elementwise(rank: int, world: int) -> dict:
    """Adafactor and a LARS-style optimizer on FSDP2 and on minidp: the outcome of 3 steps."""
    out = {}
    for name, make in (("adafactor", getattr(torch.optim, "Adafactor", None)), ("lars", LARS)):
        if make is None:
            continue
        theirs, ours = _pair(world)
        opts = [make(m.parameters(), lr=1e-2) for m in (theirs, ours)]
        results = []
        for model, opt in zip((theirs, ours), opts):
            results.append(_outcome(lambda m=model, o=opt: _train(rank, [(m, o)])[0]))
        out[name] = {"outcomes": results, "rows": _compare(3, theirs, ours)}
    return out


def zero2_freed_grads(rank: int, world: int) -> dict:
    """ZeRO-2's freed ``p.grad`` beside FSDP2 ``reshard_after_forward=False``'s, after one
    backward: the 8 ordinary calls, then ``GradScaler`` through a whole step."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from minidp.zero import Zero2Optimizer

    torch.manual_seed(0)
    base = TinyLM()
    theirs = TinyLM()
    theirs.load_state_dict(base.state_dict())
    fully_shard(theirs, mesh=init_device_mesh("cpu", (world,)), reshard_after_forward=False)
    ours = TinyLM()
    ours.load_state_dict(base.state_dict())
    opts = [
        torch.optim.AdamW(theirs.parameters(), lr=1e-2),
        Zero2Optimizer(ours.parameters(), torch.optim.AdamW, lr=1e-2),
    ]
    tokens, target = batches(rank, 1)[0]
    scalers = [torch.amp.GradScaler("cpu", init_scale=4.0) for _ in opts]
    for model, scaler in zip((theirs, ours), scalers):
        scaler.scale(loss_fn(model, tokens, target)).backward()

    def full(t):
        return t.full_tensor() if hasattr(t, "full_tensor") else t

    def save(g):
        buf = io.BytesIO()
        torch.save(g, buf)
        return buf.tell() > 0

    calls = {
        "clone": lambda p: full(p.grad.clone()),
        "torch.save": lambda p: save(p.grad),
        ".data": lambda p: full(p.grad.data),
        "detach": lambda p: full(p.grad.detach()),
        "sum": lambda p: full(p.grad.sum()),
        "abs().max()": lambda p: full(p.grad.abs().max()),
        "norm(dim=1)": lambda p: full(p.grad.norm(dim=1)),
        "add_(p)": lambda p: full(p.grad.clone().add_(p.detach())),
    }
    weight = [theirs.blocks[0].fc1.weight, ours.blocks[0].fc1.weight]
    out = {name: [_outcome(lambda p=p, f=f: f(p)) for p in weight] for name, f in calls.items()}
    unscaled = []
    for scaler, opt in zip(scalers, opts):
        unscaled.append(_outcome(lambda s=scaler, o=opt: s.unscale_(o)))
        scaler.step(opt)
        scaler.update()
    out["GradScaler.unscale_"] = unscaled
    mine = dict(ours.named_parameters())
    out["after step"] = [
        (n, diff(mine[n].detach(), p.full_tensor())) for n, p in theirs.named_parameters()
    ]
    return out
