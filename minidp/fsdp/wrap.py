"""``fully_shard(module)``: make ``module`` one FSDP unit, as FSDP2's ``fully_shard`` does.

Call it on the submodules first (transformer blocks), then on the whole model::

    for block in model.blocks:
        minidp.fully_shard(block)
    minidp.fully_shard(model)          # the root: everything the blocks do not own
    opt = torch.optim.AdamW(model.parameters())   # AFTER wrapping: it steps the shards

The DTensor shards go on the module at once (the meta-device recipe works as FSDP2's);
forward hooks do the rest (``root.py``). Nothing is broadcast: seed every rank alike. A
structure that differs across ranks raises instead of pairing unrelated collectives.

Test: ``pytest tests/test_fsdp.py``
"""

from __future__ import annotations

import dataclasses
import zlib

import torch
from torch import nn

from minidp.comm import all_gather
from minidp.comm import group as groups
from minidp.fsdp import dtensor, post_forward
from minidp.fsdp.controls import fsdp_class
from minidp.fsdp.policy import MixedPrecisionPolicy, cast_floating
from minidp.fsdp.root import ensure_root
from minidp.fsdp.unit import UNIT_ATTR, FSDPUnit, unit_of

_TAKEN = "_minidp_fsdp_taken_by"  # set on an original parameter once a unit owns it
_SHARDED_BY = "_minidp_fsdp_sharded_by"  # set on the shards a unit installs on its modules


def fully_shard(
    module: nn.Module,
    *,
    mesh=None,
    process_group=None,
    reshard_after_forward: bool | int | None = None,
    mp_policy: MixedPrecisionPolicy | None = None,
    ignored_params: set[nn.Parameter] | None = None,
) -> nn.Module:
    """Shard ``module``'s parameters (those no inner ``fully_shard`` took) across the group.

    ``reshard_after_forward``: free after forward (``True``/``None``), keep whole (``False``)
    or sharded over k ranks (an int, ``post_forward.py``). ``mesh``: 1-D, or 2-D
    ``("replicate", "shard")`` for HSDP. ``ignored_params``: whole, never gathered nor reduced."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"fully_shard: expected an nn.Module, got {type(module).__name__}")
    if unit_of(module) is not None:
        raise ValueError(
            f"fully_shard: this {type(module).__name__} is wrapped already — call "
            "fully_shard once per module (submodules first, then the root)"
        )
    names, params, locations = _owned_parameters(module, _ids(ignored_params))
    _check_not_taken(module, names, params)
    _check_dense(module)
    dtypes = {p.dtype for p in params}
    if len(dtypes) > 1:
        raise ValueError(
            f"fully_shard: one unit gathers one flat buffer, so its parameters need one dtype; "
            f"{type(module).__name__} has {sorted(map(str, dtypes))} — wrap them separately"
        )
    group, replicate = _mesh_groups(mesh, process_group)
    reshard_after_forward = post_forward.check(reshard_after_forward, group.size())
    _check_same_structure(module, names, params, group)
    torch_mesh = dtensor.torch_mesh(mesh, group, replicate, params)
    unit = FSDPUnit(
        module, names, params, locations, group, torch_mesh, reshard_after_forward, mp_policy
    )
    unit.replicate_group = replicate
    if not isinstance(reshard_after_forward, bool):  # an int k: the k-rank groups (all ranks)
        unit.post_group = post_forward.make_group(
            post_forward.mesh_ranks(mesh, group), reshard_after_forward
        )
    module.__dict__[UNIT_ATTR] = unit
    for name, p in zip(names, params):  # originals a later unit may still reach: tied ones
        setattr(p, _TAKEN, f"{type(module).__name__}.{name}")
    for p in unit.sharded:  # a later fully_shard on a submodule would find these
        setattr(p, _SHARDED_BY, type(module).__name__)
    module.register_forward_pre_hook(_pre_forward, with_kwargs=True)
    module.register_forward_hook(_post_forward)
    module.__class__ = fsdp_class(type(module))  # FSDP2's methods: unshard, reshard, ...
    return module


def _mesh_groups(mesh, process_group):
    """(shard group, replicate group or None) from ``mesh=`` or ``process_group=``."""
    if mesh is None:
        return groups.resolve(process_group), None
    if process_group is not None:
        raise ValueError(
            "fully_shard: expected mesh= or process_group=, got both. Hint: pass the mesh only"
        )
    if mesh.ndim == 1:
        return mesh.get_group(0), None
    if mesh.ndim == 2:  # FSDP2's order: (replicate, shard)
        return mesh.get_group(1), mesh.get_group(0)
    raise ValueError(
        f"fully_shard: expected a 1-D mesh (FSDP) or a 2-D (replicate, shard) mesh (HSDP), "
        f"got a {mesh.ndim}-D mesh of shape {tuple(mesh.shape)}"
    )


def _ids(ignored_params) -> set[int]:
    if ignored_params is None:
        return set()
    if isinstance(ignored_params, torch.Tensor) or not all(
        isinstance(p, nn.Parameter) for p in ignored_params
    ):
        raise TypeError(
            "fully_shard: ignored_params must be a set of nn.Parameter, got "
            f"{type(ignored_params).__name__} — e.g. set(model.norm.parameters())"
        )
    return {id(p) for p in ignored_params}


def _owned_parameters(module: nn.Module, ignored: set[int] = frozenset()):
    """Names, params, locations under ``module``, outside wrapped submodules and ``ignored``."""
    names, params, locations, index = [], [], [], {}
    stack = [("", module)]
    while stack:
        prefix, m = stack.pop(0)
        for attr, p in m.named_parameters(recurse=False, remove_duplicate=False):
            if id(p) in ignored:
                continue
            if id(p) not in index:
                index[id(p)] = len(params)
                names.append(prefix + attr)
                params.append(p)
                locations.append([])
            locations[index[id(p)]].append((m, attr))
        for child_name, child in m.named_children():
            if unit_of(child) is None:
                stack.append((f"{prefix}{child_name}.", child))
            else:  # a parameter both here and in a wrapped child cannot belong to both
                shared = [p for p in child.parameters() if id(p) in index]
                if shared:
                    raise ValueError(
                        f"fully_shard: {prefix}{child_name} is wrapped already but shares a "
                        "parameter with its parent's own parameters — wrap the parent only, "
                        "or untie the weights"
                    )
    for i, p in enumerate(params):
        if p.dim() == 0:
            raise ValueError(
                f"fully_shard: {names[i]} is a 0-dim parameter; FSDP shards dim 0 — "
                "give it shape (1,)"
            )
    return names, params, locations


def _check_not_taken(module: nn.Module, names, params) -> None:
    """A parameter tied across two units would be silently untied: FSDP2's ValueError, here."""
    for name, p in zip(names, params):
        parent = getattr(p, _SHARDED_BY, None)
        if parent is not None:  # torch refuses this call too (a TypeError from inside)
            raise ValueError(
                f"fully_shard: {type(module).__name__}'s parameter '{name}' is already a shard "
                f"of an enclosing unit ({parent}): wrap the submodules first, then the root "
                "(for block in model.blocks: fully_shard(block); then fully_shard(model))"
            )
        owner = getattr(p, _TAKEN, None)
        if owner is not None:
            raise ValueError(
                f"fully_shard: Parameter '{name}' of {type(module).__name__} is shared with a "
                f"parameter already managed by another FSDP group ({owner}). Tied parameters "
                "must be in one unit: wrap a module that holds both sides (e.g. only the "
                "root) instead of each side"
            )


def _check_dense(module: nn.Module) -> None:
    for name, m in module.named_modules():
        if getattr(m, "sparse", False) is True:
            raise ValueError(
                f"fully_shard: {name or type(m).__name__} ({type(m).__name__}) makes sparse "
                "gradients, but FSDP reduce-scatters dense gradients — use sparse=False"
            )


def _check_same_structure(module, names, params, group) -> None:
    """All-gather (crc32 of names/shapes/dtypes, #params, #elements); raise on a mismatch."""
    text = ";".join(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in zip(names, params))
    numel = sum(p.numel() for p in params)
    mine = torch.tensor([zlib.crc32(text.encode()), len(params), numel], dtype=torch.int64)
    everyone = [torch.empty_like(mine) for _ in range(group.size())]
    all_gather(everyone, mine, group=group)
    if any(not torch.equal(e, everyone[0]) for e in everyone):
        seen = ", ".join(
            f"rank {r}: {int(e[1])} parameters, {int(e[2])} elements (fingerprint {int(e[0]):08x})"
            for r, e in enumerate(everyone)
        )
        raise RuntimeError(
            f"fully_shard: ranks wrap different structures at this call ({type(module).__name__}"
            f" on rank {group.rank()}): {seen} — every rank must call fully_shard on the same "
            "modules, in the same order, with the same parameter shapes"
        )


def _pre_forward(module, args, kwargs):
    unit = unit_of(module)
    ensure_root(module).pre_forward(unit)  # the outermost unit's first forward: the root
    if unit.mp.param_dtype is not None and unit.mp.cast_forward_inputs:
        dtype = unit.mp.param_dtype
        args, kwargs = cast_floating(args, dtype), cast_floating(kwargs, dtype)
    return args, kwargs


def _post_forward(module, args, output):
    unit = unit_of(module)
    unit.root.post_forward(unit)
    if torch.is_grad_enabled():

        def pre_backward(grad):  # a gradient reached this unit's output (again: idempotent)
            unit.root.pre_backward(unit)

        for t in _tensors(output):
            if t.requires_grad:
                t.register_hook(pre_backward)
    if unit.mp.output_dtype is not None:  # after the hooks, like FSDP2: gradients pass the cast
        output = cast_floating(output, unit.mp.output_dtype)
    return output


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):  # e.g. a ModelOutput-like return value
            yield from _tensors(getattr(value, field.name))
