"""Loading a DCP checkpoint into minidp's shards, at any world size or mesh.

``load_sharded`` (the runbook is ``checkpoint.py``'s) reads the checkpoint's metadata
first, for two reasons: a fresh optimizer has no state tensors for DCP to load into, and
which ones exist depends on the optimizer that saved them — the metadata lists them with
their full sizes and dtypes, so this rank allocates exactly its rows of those; and every
model key, full shape and dtype is checked before DCP runs, so every rank fails the same
way, naming the parameter, instead of deep inside DCP (or one rank waiting for the others).

Test: ``pytest tests/test_fsdp_dcp.py``
"""

from __future__ import annotations

import os

import torch
from torch import nn

from minidp.fsdp.checkpoint import (
    HINT_SAME_MODEL,
    MODEL,
    OPTIM,
    api,
    as_dtensor,
    get_model_state_dict,
    optimizer_params,
    shard_index,
)


def load_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, path) -> None:
    """Load a DCP checkpoint (from :func:`save_sharded` or FSDP2's ``dcp.save``, any world
    size or mesh) into ``model``'s shards in place, and into ``optimizer`` (``None``: the
    model only). Call on every rank, between steps, after the optimizer is built."""
    path = os.fspath(path)
    saved = _read_metadata(path)  # {flat key: Tensor- or BytesStorageMetadata}
    model_sd = get_model_state_dict(model)
    _check_model(model_sd, saved, path)
    state = {MODEL: model_sd}
    if optimizer is not None:
        state[OPTIM] = _optimizer_template(model, optimizer, saved, path)
    try:
        api().dcp.load(state, checkpoint_id=path)  # fills every tensor of ``state`` in place
    except api().CheckpointException as e:
        raise RuntimeError(
            f"load_sharded: torch.distributed.checkpoint.load could not read {path!r}; DCP "
            f"said: {_dcp_said(e)}. Hint: the checkpoint looks incomplete — a rank's data "
            "file missing or cut short (an interrupted save?): save it again"
        ) from e
    if optimizer is not None:
        _set_optimizer_state(model, optimizer, state[OPTIM], path)


def _read_metadata(path: str) -> dict:
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"load_sharded: expected a checkpoint directory at {path!r}, got "
            f"{'a file' if os.path.exists(path) else 'nothing there'}. Hint: pass the "
            "directory given to save_sharded (or to torch.distributed.checkpoint.save)"
        )
    try:
        return api().dcp.FileSystemReader(path).read_metadata().state_dict_metadata
    except Exception as e:  # DCP's own reader: a missing or unreadable metadata file
        raise FileNotFoundError(
            f"load_sharded: expected a DCP checkpoint in {path!r}, got a directory whose "
            f"metadata DCP cannot read: {type(e).__name__}: {_first_lines(e)}. Hint: the save "
            "did not finish (the metadata is written last), or this is not a DCP directory"
        ) from e


def _check_model(model_sd: dict, saved: dict, path: str) -> None:
    """Every model key saved as a tensor of the model's full shape and dtype; nothing more."""
    prefix = f"{MODEL}."
    if not any(k.startswith(prefix) for k in saved):
        got = sorted({k.split(".")[0] for k in saved})
        raise ValueError(
            f"load_sharded: expected model tensors under {MODEL!r} in {path!r}, got top-level "
            f"keys {got}. Hint: save with save_sharded, or with FSDP2 as "
            '{"model": get_model_state_dict(model), "optim": ...}'
        )
    problems = []
    for name, t in model_sd.items():
        meta = saved.get(f"{MODEL}.{name}")
        if not isinstance(meta, api().TensorStorageMetadata):
            problems.append(
                f"{name!r}: expected a {tuple(t.shape)} tensor (the model), got none saved"
            )
        elif tuple(meta.size) != tuple(t.shape):
            problems.append(
                f"{name!r}: expected {tuple(t.shape)} (the model), got "
                f"{tuple(meta.size)} (the checkpoint)"
            )
        elif meta.properties.dtype != t.dtype:
            problems.append(
                f"{name!r}: expected {t.dtype} (the model), got {meta.properties.dtype}"
            )
    extra = sorted(k[len(prefix) :] for k in saved if k.startswith(prefix))
    extra = [k for k in extra if k not in model_sd]
    problems += [f"{k!r}: not in the model, but in the checkpoint" for k in extra]
    if problems:
        shown = "\n  ".join(problems[:6]) + (
            f"\n  ... {len(problems) - 6} more" * (len(problems) > 6)
        )
        raise ValueError(
            f"load_sharded: the checkpoint in {path!r} does not fit this model "
            f"({len(problems)} mismatch(es)):\n  {shown}\n{HINT_SAME_MODEL}"
        )


def _optimizer_template(model: nn.Module, optimizer, saved: dict, path: str) -> dict:
    """Empty tensors shaped like the saved optimizer state (this rank's rows), for DCP to
    fill, and the current param groups for the hyperparameters saved."""
    index = shard_index(model)
    meshes: dict = {}  # (shard group, replicate group) ids -> torch DeviceMesh
    params, names = optimizer_params(model, optimizer)
    if not any(k.startswith(f"{OPTIM}.") for k in saved):
        raise ValueError(
            f"load_sharded: expected optimizer state under {OPTIM!r} in {path!r}, got only "
            f"{sorted({k.split('.')[0] for k in saved})}. Hint: pass optimizer=None to load "
            "the model only, or save with the optimizer"
        )
    state = {}
    for p, name in zip(params, names):
        prefix = f"{OPTIM}.state.{name}."
        keys = [k[len(prefix) :] for k in saved if k.startswith(prefix)]
        entries = {}
        for key in keys:  # e.g. exp_avg, exp_avg_sq, step
            meta = saved[prefix + key]
            if isinstance(meta, api().BytesStorageMetadata):
                entries[key] = None  # a non-tensor value: DCP puts the saved object here
                continue
            hit = index.get(id(p))
            dtype = meta.properties.dtype
            if hit is not None and tuple(meta.size) == tuple(hit[0].shapes[hit[1]]):
                local = torch.zeros(p.shape, dtype=dtype, device=p.device)  # (len, *rest)
                entries[key] = as_dtensor(local, hit[0], hit[0].shapes[hit[1]], meshes)
            else:  # a scalar (step) or the state of a parameter no unit owns: whole
                entries[key] = torch.zeros(tuple(meta.size), dtype=dtype, device=p.device)
        if entries:
            state[name] = entries
    groups = []
    for g, group in enumerate(optimizer.state_dict()["param_groups"]):
        prefix = f"{OPTIM}.param_groups.{g}."
        if f"{prefix}params" not in saved:
            raise ValueError(
                f"load_sharded: expected {len(optimizer.param_groups)} param group(s) in "
                f"{path!r} (the optimizer's), got {g}. Hint: build the optimizer with the "
                "same param groups as the one that saved"
            )
        groups.append({k: v for k, v in group.items() if prefix + k in saved})
    return {"state": state, "param_groups": groups}


def _set_optimizer_state(model: nn.Module, optimizer, loaded: dict, path: str) -> None:
    """Hand the loaded state to ``optimizer.load_state_dict`` in its own (index) format."""
    params, names = optimizer_params(model, optimizer)
    position = {name: i for i, name in enumerate(names)}
    current = optimizer.state_dict()["param_groups"]
    groups = []
    for g, (mine, theirs) in enumerate(zip(current, loaded["param_groups"])):
        want = [names[i] for i in mine["params"]]
        if sorted(theirs["params"]) != sorted(want):
            raise ValueError(
                f"load_sharded: param group {g} holds {want} in the optimizer but "
                f"{theirs['params']} in {path!r}. Hint: build the optimizer's param groups "
                "as the saving run did"
            )
        groups.append({**mine, **theirs, "params": mine["params"]})
    state = {
        position[name]: {
            k: v.to_local() if isinstance(v, api().DTensor) else v for k, v in e.items()
        }
        for name, e in loaded["state"].items()
    }
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _dcp_said(e: BaseException) -> str:
    """The first rank's error inside DCP's ``CheckpointException`` (its ``failures``: rank ->
    (exception, stack)), not the traceback text its message starts with."""
    failures = getattr(e, "failures", None) or {}
    if not failures:
        return _first_lines(e)
    rank, error = min(failures.items())
    if isinstance(error, tuple):  # (exception, its stack summary)
        error = error[0]
    others = f" (and {len(failures) - 1} other rank(s))" if len(failures) > 1 else ""
    return f"rank {rank}: {type(error).__name__}: {_first_lines(error)}{others}"


def _first_lines(e: BaseException, lines: int = 3) -> str:
    text = " | ".join(s.strip() for s in str(e).strip().splitlines()[:lines] if s.strip())
    return text[:500]
