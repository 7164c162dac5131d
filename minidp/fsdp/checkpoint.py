"""Sharded checkpoints in ``torch.distributed.checkpoint`` (DCP) format: FSDP2 reads them.

Every rank writes only its own shards, plus enough metadata (each shard's rows of which
full tensor) for any world size and mesh to load them: a checkpoint saved by minidp at 2
ranks loads into minidp or FSDP2 at 3, and one FSDP2 saved loads into minidp, bit for bit.

Runbook (every rank, between steps — both calls are collectives)::

    from minidp.fsdp import load_sharded, save_sharded

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

The API, named after torch's: :func:`get_model_state_dict` / :func:`get_optimizer_state_dict`
return what ``torch.distributed.checkpoint.state_dict``'s functions of those names return
for FSDP2 (the shards as DTensors, keyed by parameter name), for your own ``dcp.save``;
:func:`save_sharded` / :func:`load_sharded` are the two calls a training loop needs (torch
spells them ``dcp.save``/``dcp.load`` of those dicts plus ``set_*_state_dict``); "sharded"
as opposed to ``full_state_dict``, which gathers everything on every rank.

Loading (``load_sharded``, checking the checkpoint first) is in ``checkpoint_load.py``.

Test: ``pytest tests/test_fsdp_dcp.py`` (W=2 -> 3 and 3 -> 2 against FSDP2, torch >= 2.8;
``-m slow`` adds HSDP 2x2 -> 3).

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
def api() -> types.SimpleNamespace:
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
    index = shard_index(model)
    meshes: dict = {}  # (shard group, replicate group) ids -> torch DeviceMesh
    out = {}
    for name, t in model.state_dict(keep_vars=True).items():  # tied: both names, like FSDP2
        hit = index.get(id(t))
        if hit is None:
            out[name] = t.detach()  # whole on every rank: DCP keeps one copy
        else:
            unit, i = hit
            out[name] = as_dtensor(t.detach(), unit, unit.shapes[i], meshes)
    return out


def get_optimizer_state_dict(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """``{"state": {name: {key: DTensor | tensor}}, "param_groups": [{..., "params":
    [names]}]}`` — FSDP2's ``get_optimizer_state_dict``'s format, viewing the optimizer's
    own state tensors (no copies). A collective on HSDP; call it on every rank."""
    index = shard_index(model)
    meshes: dict = {}  # (shard group, replicate group) ids -> torch DeviceMesh
    params, names = optimizer_params(model, optimizer)
    sd = optimizer.state_dict()  # {"state": {i: {...}}, "param_groups": [{"params": [i]}]}
    state = {}
    for i, entries in sd["state"].items():
        p, hit = params[i], index.get(id(params[i]))
        state[names[i]] = {
            k: as_dtensor(v, hit[0], hit[0].shapes[hit[1]], meshes)
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
    api().dcp.save(state, checkpoint_id=os.fspath(path))


# ---- the shards as DTensors ------------------------------------------------------------


def shard_index(model: nn.Module) -> dict[int, tuple[FSDPUnit, int]]:
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


def as_dtensor(local: torch.Tensor, unit: FSDPUnit, full_shape, meshes):
    """``local`` (this rank's ``(len, *rest)`` rows) as the ``Shard(0)`` piece of a tensor of
    ``full_shape``, sharing ``local``'s storage."""
    mesh = _torch_mesh(unit, meshes)
    dt = api()
    placements = [dt.Shard(0)] if mesh.ndim == 1 else [dt.Replicate(), dt.Shard(0)]
    stride = torch.empty(full_shape, device="meta").stride()  # the full tensor, contiguous
    return dt.DTensor.from_local(
        local, mesh, placements, run_check=False, shape=torch.Size(full_shape), stride=stride
    )


def _torch_mesh(unit: FSDPUnit, meshes: dict):
    """A torch ``DeviceMesh`` over the unit's groups (no new process groups are made)."""
    key = (id(unit.group), id(unit.replicate_group))
    if key in meshes:
        return meshes[key]
    device = unit.device.type
    if unit.replicate_group is None:
        mesh = api().DeviceMesh.from_group(unit.group, device)
    else:  # HSDP: the 2-D grid of global ranks — this rank knows its row, gathers the others
        row = torch.tensor(dist.get_process_group_ranks(unit.group))  # (shard,)
        rows = [torch.empty_like(row) for _ in range(unit.replicate_group.size())]
        all_gather(rows, row, group=unit.replicate_group)
        grid = torch.stack(rows)  # (replicate, shard) global ranks
        mesh = api().DeviceMesh.from_group(
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


def optimizer_params(model: nn.Module, optimizer) -> tuple[list, list[str]]:
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
