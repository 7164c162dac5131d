"""Rank-side runners for ``tests/test_fsdp_dcp.py`` (no tests here): DCP checkpoints that
minidp and FSDP2 write at one world size and read at another.

* ``train_and_save`` — FSDP2 and minidp train 2 steps side by side; one of them saves,
  both the same way: ``dcp.save`` of torch's ``get_*_state_dict`` (``save``).
* ``load_and_resume`` — a fresh FSDP2 and a fresh minidp (weights moved off the trained
  ones, so a skipped load shows) load that directory at this world size, are compared
  right after loading (parameters, shards, optimizer state, and against what was saved),
  then train 2 more steps side by side.
* ``bad_loads`` — loads that must fail, tried on FSDP2 and on minidp: the exceptions (they
  pickle) and whether the model was overwritten before the failure.

Rows are ``(step, tensor, what, max |diff|)`` like ``fsdp_scenarios._compare``'s (step -1:
right after loading). Functions sent to rank processes must be module-level.
"""

from __future__ import annotations

import os
import shutil

import torch
from fsdp_scenarios import _compare, _local, _models
from test_fsdp_support import TinyLM, batches, diff, loss_fn, make_optimizer, wrap

import minidp
from minidp.fsdp import full_state_dict

NAMES = ("replicate", "shard")


def _step(models_and_opts, tokens, target) -> None:
    for model, opt in models_and_opts:
        opt.zero_grad()
        loss_fn(model, tokens, target).backward()
        opt.step()


def _hsdp_models(shape: tuple):
    """(FSDP2, minidp) on a 2-D ("replicate", "shard") mesh of ``shape``, equal weights."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    reference = TinyLM()
    theirs, ours = TinyLM(), TinyLM()
    theirs.load_state_dict(reference.state_dict())
    ours.load_state_dict(reference.state_dict())
    mesh_t = init_device_mesh("cpu", shape, mesh_dim_names=NAMES)
    mesh_m = minidp.init_device_mesh("cpu", shape, mesh_dim_names=NAMES)
    wrap(theirs, fully_shard, True, MixedPrecisionPolicy(), mesh=mesh_t)
    wrap(ours, minidp.fully_shard, True, minidp.MixedPrecisionPolicy(), mesh=mesh_m)
    return theirs, ours


def _fsdp2_state(model, opt) -> dict:
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    return {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}


def save(model, opt, path: str) -> None:
    """torch's way, for FSDP2 and minidp alike."""
    import torch.distributed.checkpoint as dcp

    dcp.save(_fsdp2_state(model, opt), checkpoint_id=path)


def load(model, opt, path: str) -> None:
    """torch's way (``opt=None``: the model only), for FSDP2 and minidp alike."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    state = _fsdp2_state(model, opt) if opt is not None else {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(model, state["model"])
    if opt is not None:
        set_optimizer_state_dict(model, opt, state["optim"])


def _full_optim(model, opt) -> dict[str, dict[str, torch.Tensor]]:
    """FSDP2's optimizer state, every tensor whole (a collective): what the other world
    must find after loading."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
    )

    full = get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    return {n: {k: v.clone() for k, v in e.items()} for n, e in full["state"].items()}


def train_and_save(rank: int, world: int, saver: str, path: str, mesh_shape=None) -> dict:
    """Train FSDP2 and minidp 2 steps side by side; ``saver`` ("minidp" or "fsdp2") saves to
    ``path``. Returns the rows, the full parameters and full optimizer state saved (rank 0),
    and the DCP state dict minidp presents, gathered whole by DTensor itself."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    if mesh_shape is None:
        theirs, ours = _models({"adamw"}, world, None, True)
    else:
        theirs, ours = _hsdp_models(mesh_shape)
    opts = [make_optimizer("adamw", m.parameters()) for m in (theirs, ours)]
    rows = []
    for step, (tokens, target) in enumerate(batches(rank, 2)):
        _step(zip((theirs, ours), opts), tokens, target)
        rows += _compare(step, theirs, ours)
    if saver == "minidp":
        save(ours, opts[1], path)
    else:
        save(theirs, opts[0], path)
    full = full_state_dict(ours)
    # minidp's DTensors are well formed: DTensor's own all-gather rebuilds the full tensors
    presented = get_model_state_dict(ours)
    rows += [  # (the tied head.weight is emb.weight, under its first name in ``full``)
        (2, n, "dtensor", diff(t.full_tensor(), full[n])) for n, t in presented.items() if n in full
    ]
    optim = _full_optim(theirs, opts[0])  # (equal to minidp's: the rows above say so)
    return {"rows": rows, "full": full, "optim": optim} if rank == 0 else {"rows": rows}


def load_and_resume(
    rank: int, world: int, path: str, saved: dict, moves: tuple = (), mesh_shape=None
) -> list:
    """A fresh FSDP2 and a fresh minidp load ``path``; compare; train 2 steps side by side.
    ``saved``: ``train_and_save``'s rank-0 result. ``moves``: "model_only" — minidp loads
    the model only (its optimizer starts fresh): the mutation the comparison must catch.
    ``mesh_shape``: both HSDP on a 2-D mesh of that shape (else 1-D over the world)."""
    if mesh_shape is None:
        theirs, ours = _models({"adamw"}, world, None, True)
    else:
        theirs, ours = _hsdp_models(mesh_shape)
    with torch.no_grad():
        for model in (theirs, ours):
            for p in model.parameters():
                p.add_(1.0)  # not the saved weights: a skipped load would show
    opt_t, opt_m = (make_optimizer("adamw", m.parameters()) for m in (theirs, ours))
    load(theirs, opt_t, path)
    load(ours, None if "model_only" in moves else opt_m, path)

    rows = _compare(-1, theirs, ours)
    mine = dict(ours.named_parameters())
    for n, p in theirs.named_parameters():  # optimizer state, shard by shard
        want, got = opt_t.state.get(p, {}), opt_m.state.get(mine[n], {})
        for k in sorted(want.keys() | got.keys()):
            rows.append((-1, n, k, diff(_local(got.get(k)), _local(want.get(k)))))
    full = full_state_dict(ours)  # against what the other world saved, whole
    rows += [(-1, n, "saved", diff(full[n], t)) for n, t in saved["full"].items()]
    optim = _full_optim(theirs, opt_t)
    for n, entries in saved["optim"].items():
        for k, t in entries.items():
            rows.append((-1, n, f"saved {k}", diff(optim[n][k], t)))
    for step, (tokens, target) in enumerate(batches(rank + 10, 2)):
        _step(((theirs, opt_t), (ours, opt_m)), tokens, target)
        rows += _compare(step, theirs, ours)
    return rows


def at_three(rank: int, world: int, minidp_dir: str, saved: dict, fsdp2_dir: str, bad: str):
    """Everything the 3-rank world does, in one call: load minidp's 2-rank checkpoint (and
    the model-only mutation), train and save FSDP2's, and the failing loads."""
    return {
        "resumed": load_and_resume(rank, world, minidp_dir, saved),
        "model_only": load_and_resume(rank, world, minidp_dir, saved, ("model_only",)),
        "fsdp2_saved": train_and_save(rank, world, "fsdp2", fsdp2_dir),
        "errors": bad_loads(rank, world, minidp_dir, bad),
    }


def bad_loads(rank: int, world: int, good: str, scratch: str) -> dict[str, list]:
    """Loads that must fail, each tried on FSDP2 and on minidp (torch's own calls on both):
    {case: [(exception type, message, model overwritten?) for FSDP2, then minidp]}."""
    import torch.distributed as dist
    import torch.distributed.fsdp as fsdp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))

    def attempt(shard_fn, opt_kind, path, **kw):
        torch.manual_seed(0)
        policy = (minidp if shard_fn is minidp.fully_shard else fsdp).MixedPrecisionPolicy()
        model = wrap(TinyLM(**kw), shard_fn, True, policy)
        opt = make_optimizer(opt_kind, model.parameters())
        before = {n: p.full_tensor() for n, p in model.named_parameters()}
        try:
            load(model, opt, path)
        except BaseException as e:  # noqa: BLE001 — DCP's CheckpointException is one
            after = {n: p.full_tensor() for n, p in model.named_parameters()}
            wrote = any(not torch.equal(before[n], after[n]) for n in after)
            return type(e).__name__, str(e), wrote
        return None, "", True

    def both(opt_kind, path, **kw):
        ours = attempt(minidp.fully_shard, opt_kind, path, **kw)
        return [attempt(lambda m, **a: fully_shard(m, mesh=mesh, **a), opt_kind, path, **kw), ours]

    broken = os.path.join(scratch, "broken")
    sgd_dir = os.path.join(scratch, f"sgd_w{world}")
    if rank == 0:  # a copy of a good checkpoint with one rank's data file gone
        shutil.copytree(good, broken)
        os.remove(
            os.path.join(broken, sorted(f for f in os.listdir(broken) if f.endswith(".distcp"))[-1])
        )
    torch.manual_seed(0)  # an SGD(momentum) checkpoint of this world, for AdamW to load
    model = wrap(TinyLM(), minidp.fully_shard, True, None)
    opt = make_optimizer("sgd", model.parameters())
    _step([(model, opt)], *batches(rank, 1)[0])
    save(model, opt, sgd_dir)
    dist.barrier()
    return {
        "missing_dir": both("adamw", os.path.join(scratch, "no_such_checkpoint")),
        "other_shape": both("adamw", good, vocab=17),
        "missing_key": both("adamw", good, blocks=3),
        "missing_file": both("adamw", broken),
        "adamw_into_sgd": both("sgd", good),
        "sgd_into_adamw": both("adamw", sgd_dir),
    }


def at_four_hsdp(rank: int, world: int, minidp_dir: str, saved: dict, hsdp_dir: str) -> dict:
    """2 x 2 HSDP, both sides: load minidp's 2-rank checkpoint and train on; then train from
    scratch and minidp saves (for the 3-rank world to load)."""
    return {
        "resumed": load_and_resume(rank, world, minidp_dir, saved, mesh_shape=(2, 2)),
        "saved": train_and_save(rank, world, "minidp", hsdp_dir, mesh_shape=(2, 2)),
    }
