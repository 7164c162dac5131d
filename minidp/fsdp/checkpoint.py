"""Sharded checkpoints in ``torch.distributed.checkpoint`` (DCP) format: FSDP2 reads them.

Every rank writes only its own shards, plus enough metadata (each shard's rows of which
full tensor) for any world size and mesh to load them: a checkpoint saved by minidp at 2
ranks loads into minidp or FSDP2 at 3, and one FSDP2 saved loads into minidp, bit for bit.

Runbook (every rank, between steps — both calls are collectives)::

    from minidp.fsdp import save_sharded, load_sharded

    save_sharded(model, optimizer, "ckpt/step100")    # model: fully_shard'ed, any mesh
    ...                                               # later, any world size or mesh:
    model = build(); fully_shard(...); optimizer = AdamW(model.parameters())
    load_sharded(model, optimizer, "ckpt/step100")    # optimizer=None: the model only

The same directory with FSDP2 (torch's public API; the top-level keys are "model" and
"optim")::

    from torch.distributed.checkpoint.state_dict import (get_model_state_dict,
        get_optimizer_state_dict, set_model_state_dict, set_optimizer_state_dict)
    sd = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
    dcp.load(sd, checkpoint_id="ckpt/step100")        # or dcp.save(sd, checkpoint_id=...)
    set_model_state_dict(model, sd["model"]); set_optimizer_state_dict(model, opt, sd["optim"])

Test: ``pytest tests/test_fsdp_dcp.py`` (W=2 -> 3 and 3 -> 2 against FSDP2, torch >= 2.8).

How minidp's shards map onto DCP's layout
-----------------------------------------
A unit's parameter ``i`` on shard-group rank ``r`` of ``W`` holds the rows
``[r * ceil(n / W), r * ceil(n / W) + len)`` of the full ``(n, *rest)`` tensor
(``shard.py``): ``torch.chunk(full, W)[r]``, which is also what a DTensor with placement
``Shard(0)`` holds at mesh coordinate ``r``. So :func:`get_model_state_dict` presents each
shard as ``DTensor.from_local(shard, mesh, [Shard(0)], shape=full shape)`` — a view of the
shard's own storage, no copy — and DCP records, per rank, one chunk: ``offsets=(r *
ceil(n/W), 0, ...)``, ``sizes=(len, *rest)`` of a tensor of ``size=(n, *rest)``. Loading
asks for the chunk of the *loading* world's rank and DCP reads the rows where it overlaps
the saved chunks — that is all resharding is (13 rows saved as 7 + 6, loaded as 5 + 5 + 3).
DCP loads in place, into the shards themselves.

HSDP (2-D mesh ``("replicate", "shard")``): placements ``[Replicate(), Shard(0)]`` on a
torch ``DeviceMesh`` over the same ranks. Replicas present the same chunk; DCP writes it
once (it drops duplicates of a key at the same offsets).

The optimizer: :func:`get_optimizer_state_dict` returns FSDP2's format — state keyed by
each parameter's fully-qualified name (tied parameters: their first name, as
``named_parameters()`` lists them), ``exp_avg`` / ``exp_avg_sq`` as DTensors laid out like
their parameter, ``step`` a plain scalar tensor (the same on every rank), and
``param_groups`` listing names instead of indices. Names follow
``torch.distributed.checkpoint.state_dict``'s functions of the same names, whose output
for FSDP2 has exactly these keys: that is what makes the two load each other's files.

Why :func:`load_sharded` reads the checkpoint's metadata first: a fresh optimizer has no
state tensors for DCP to load into, and which ones exist (``exp_avg``? ``momentum_buffer``?)
depends on the optimizer that saved them. The metadata lists them with their full sizes
and dtypes, so the load allocates exactly those (this rank's rows) and hands them to
``optimizer.load_state_dict``. The same read checks every model key and full shape before
DCP runs, so a checkpoint of another model fails with the names, not deep inside DCP.
"""

from __future__ import annotations

import functools
import os
import types

import torch
import torch.distributed as dist
from torch import nn

from minidp.comm import all_gather
from minidp.fsdp.unit import FSDPUnit, unit_of

MODEL, OPTIM = "model", "optim"  # the top-level keys (torch's own examples use these)
HINT_SAME_MODEL = (
    "Hint: load a checkpoint of the same architecture — the parameter names and full "
    "shapes must match; the world size and the mesh may differ"
)


@functools.cache
def _api() -> types.SimpleNamespace:
    """DCP and DTensor, imported at first use: ``import minidp.fsdp`` stays fast (DCP adds
    about half a second) and works on torch 2.4, whose DTensor was not public yet."""
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.metadata import (
            BytesStorageMetadata,
            TensorStorageMetadata,
        )
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.tensor import DTensor, Replicate, Shard
    except ImportError as e:
        raise ImportError(
            f"minidp.fsdp.checkpoint: expected torch >= 2.5 (public torch.distributed.tensor "
            f"and .checkpoint), got torch {torch.__version__}: {e}. Hint: pip install -U torch"
        ) from e
    return types.SimpleNamespace(**{
        "dcp": dcp, "CheckpointException": CheckpointException, "DeviceMesh": DeviceMesh,
        "BytesStorageMetadata": BytesStorageMetadata, "DTensor": DTensor, "Shard": Shard,
        "TensorStorageMetadata": TensorStorageMetadata, "Replicate": Replicate,
    })  # fmt: skip


def get_model_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``{name: DTensor}`` viewing this rank's shards (buffers and parameters no unit owns:
    plain tensors, the same on every rank) — FSDP2's ``get_model_state_dict``'s format.

    No copies: DCP saves from these tensors and loads into them in place. A collective on
    HSDP (each unit learns its mesh's other rows once); call it on every rank."""
    index = _shard_index(model)
    meshes: dict = {}  # (shard group, replicate group) ids -> torch DeviceMesh
    out = {}
    for name, t in model.state_dict(keep_vars=True).items():  # tied: both names, like FSDP2
        hit = index.get(id(t))
        if hit is None:
            out[name] = t.detach()  # whole on every rank: DCP keeps one copy
        else:
            unit, i = hit
            out[name] = _as_dtensor(t.detach(), unit, unit.shapes[i], meshes)
    return out


def get_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """``{"state": {name: {key: DTensor | tensor}}, "param_groups": [{..., "params":
    [names]}]}`` — FSDP2's ``get_optimizer_state_dict``'s format, viewing the optimizer's
    own state tensors (no copies). A collective on HSDP; call it on every rank."""
    index = _shard_index(model)
    meshes: dict = {}  # (shard group, replicate group) ids -> torch DeviceMesh
    params, names = _optimizer_params(model, optimizer)
    sd = optimizer.state_dict()  # {"state": {i: {...}}, "param_groups": [{"params": [i]}]}
    state = {}
    for i, entries in sd["state"].items():
        p, hit = params[i], index.get(id(params[i]))
        state[names[i]] = {
            k: _as_dtensor(v, hit[0], hit[0].shapes[hit[1]], meshes)
            if hit is not None and _like_shard(v, p)  # exp_avg, exp_avg_sq: (len, *rest)
            else v  # step: a scalar, the same on every rank
            for k, v in entries.items()
        }
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in sd["param_groups"]]
    return {"state": state, "param_groups": groups}


def save_sharded(model: nn.Module, optimizer: torch.optim.Optimizer | None, path) -> None:
    """Write ``{"model": ..., "optim": ...}`` to the directory ``path`` with DCP: every rank
    its own shards. Call on every rank, between steps; ``optimizer=None``: the model only."""
    state = {MODEL: get_model_state_dict(model)}
    if optimizer is not None:
        state[OPTIM] = get_optimizer_state_dict(model, optimizer)
    _api().dcp.save(state, checkpoint_id=os.fspath(path))


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
        _api().dcp.load(state, checkpoint_id=path)  # fills every tensor of ``state`` in place
    except _api().CheckpointException as e:
        raise RuntimeError(
            f"load_sharded: torch.distributed.checkpoint.load could not read {path!r}; DCP "
            f"said: {_dcp_said(e)}. Hint: the checkpoint looks incomplete — a rank's data "
            "file missing or cut short (an interrupted save?): save it again"
        ) from e
    if optimizer is not None:
        _set_optimizer_state(model, optimizer, state[OPTIM], path)


# ---- the shards as DTensors ------------------------------------------------------------


def _shard_index(model: nn.Module) -> dict[int, tuple[FSDPUnit, int]]:
    """``id(shard) -> (unit, parameter index)`` for every unit's shards in ``model``."""
    index = {}
    for name, module in model.named_modules():
        unit = unit_of(module)
        if unit is None:
            continue
        if unit.is_unsharded:  # the module holds the full parameters, not the shards
            raise RuntimeError(
                f"minidp.fsdp.checkpoint: expected every unit resharded (between steps), got "
                f"{name or 'the root'} ({type(module).__name__}) gathered. Hint: call "
                "model.reshard() first, or save after optimizer.step()"
            )
        if not isinstance(unit.group, dist.ProcessGroup):
            raise TypeError(
                f"minidp.fsdp.checkpoint: DCP needs torch.distributed process groups, got a "
                f"{type(unit.group).__name__}. Hint: start the ranks as processes "
                "(minidp.launch.spawn or torchrun), not as a thread world"
            )
        unit.follow_module()  # adopt a .to(dtype) since the last step: the module's truth
        for i, p in enumerate(unit.sharded):
            index[id(p)] = (unit, i)
    if not index:
        raise ValueError(
            f"minidp.fsdp.checkpoint: expected a fully_shard'ed model, got a "
            f"{type(model).__name__} with no units. Hint: call minidp.fully_shard first"
        )
    return index


def _as_dtensor(local: torch.Tensor, unit: FSDPUnit, full_shape, meshes):
    """``local`` (this rank's ``(len, *rest)`` rows) as the ``Shard(0)`` piece of a tensor of
    ``full_shape``, sharing ``local``'s storage."""
    mesh = _torch_mesh(unit, meshes)
    api = _api()
    placements = [api.Shard(0)] if mesh.ndim == 1 else [api.Replicate(), api.Shard(0)]
    stride = torch.empty(full_shape, device="meta").stride()  # the full tensor, contiguous
    return api.DTensor.from_local(
        local, mesh, placements, run_check=False, shape=torch.Size(full_shape), stride=stride
    )


def _torch_mesh(unit: FSDPUnit, meshes: dict):
    """A torch ``DeviceMesh`` over the unit's groups (no new process groups are made)."""
    key = (id(unit.group), id(unit.replicate_group))
    if key in meshes:
        return meshes[key]
    device = unit.device.type
    if unit.replicate_group is None:
        mesh = _api().DeviceMesh.from_group(unit.group, device)
    else:  # HSDP: the 2-D grid of global ranks — this rank knows its row, gathers the others
        row = torch.tensor(dist.get_process_group_ranks(unit.group))  # (shard,)
        rows = [torch.empty_like(row) for _ in range(unit.replicate_group.size())]
        all_gather(rows, row, group=unit.replicate_group)
        grid = torch.stack(rows)  # (replicate, shard) global ranks
        mesh = _api().DeviceMesh.from_group(
            [unit.replicate_group, unit.group],
            device,
            mesh=grid,
            mesh_dim_names=("replicate", "shard"),
        )
    meshes[key] = mesh
    return mesh


def _like_shard(value, param: torch.Tensor) -> bool:
    """A state tensor laid out like the shard it belongs to (``exp_avg``), not a scalar."""
    return isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape == param.shape


def _optimizer_params(model: nn.Module, optimizer) -> tuple[list, list[str]]:
    """The optimizer's parameters in ``state_dict()`` index order, and their names."""
    first_name = {}
    for name, p in model.named_parameters():  # tied: the first name, as FSDP2 keys them
        first_name.setdefault(id(p), name)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    stray = [tuple(p.shape) for p in params if id(p) not in first_name]
    if stray:
        raise ValueError(
            f"minidp.fsdp.checkpoint: expected the optimizer to hold the model's parameters "
            f"(its shards), got {len(stray)} tensor(s) the model does not have, shapes "
            f"{stray[:4]}. Hint: build the optimizer after fully_shard, from model.parameters()"
        )
    return params, [first_name[id(p)] for p in params]


# ---- loading -----------------------------------------------------------------------------


def _read_metadata(path: str) -> dict:
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"load_sharded: expected a checkpoint directory at {path!r}, got "
            f"{'a file' if os.path.exists(path) else 'nothing there'}. Hint: pass the "
            "directory given to save_sharded (or to torch.distributed.checkpoint.save)"
        )
    try:
        return _api().dcp.FileSystemReader(path).read_metadata().state_dict_metadata
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
        if not isinstance(meta, _api().TensorStorageMetadata):
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
    index = _shard_index(model)
    meshes: dict = {}  # (shard group, replicate group) ids -> torch DeviceMesh
    params, names = _optimizer_params(model, optimizer)
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
            if isinstance(meta, _api().BytesStorageMetadata):
                entries[key] = None  # a non-tensor value: DCP puts the saved object here
                continue
            hit = index.get(id(p))
            dtype = meta.properties.dtype
            if hit is not None and tuple(meta.size) == tuple(hit[0].shapes[hit[1]]):
                local = torch.zeros(p.shape, dtype=dtype, device=p.device)  # (len, *rest)
                entries[key] = _as_dtensor(local, hit[0], hit[0].shapes[hit[1]], meshes)
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
    params, names = _optimizer_params(model, optimizer)
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
            k: v.to_local() if isinstance(v, _api().DTensor) else v for k, v in e.items()
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
