"""``fully_shard(module)``: make ``module`` one FSDP unit, as FSDP2's ``fully_shard`` does.

Call it on the submodules first (transformer blocks), then on the whole model::

    for block in model.blocks:
        minidp.fully_shard(block)
    minidp.fully_shard(model)          # the root: everything the blocks do not own
    opt = torch.optim.AdamW(model.parameters())   # AFTER wrapping: it steps the shards

``fully_shard([a, b])`` makes one unit of several modules (one gather, one reduce-scatter;
tied weights across them stay tied). The DTensor shards go on the module at once (the
meta-device recipe works as FSDP2's); forward hooks do the rest (``hooks.py``). Nothing
is broadcast: seed every rank alike. A structure that differs across ranks raises instead
of pairing unrelated collectives. FSDP2's refusals, in FSDP2's words, then a hint.

Test: ``pytest tests/test_fsdp.py tests/test_fsdp_wrapping.py``
"""

from __future__ import annotations

import zlib

import torch
from torch import nn

from minidp.comm import group as groups
from minidp.fsdp import collectives, dtensor, hooks, introspect, post_forward
from minidp.fsdp.controls import fsdp_class
from minidp.fsdp.layout import make_layouts
from minidp.fsdp.policy import MixedPrecisionPolicy, OffloadPolicy
from minidp.fsdp.unit import UNIT_ATTR, FSDPUnit, unit_of

_NO_MIXED_PRECISION, _NO_OFFLOAD = MixedPrecisionPolicy(), OffloadPolicy()  # the defaults
_TAKEN = "_minidp_fsdp_taken_by"  # set on an original parameter once a unit owns it
_SHARDED_BY = "_minidp_fsdp_sharded_by"  # set on the shards a unit installs on its modules


def fully_shard(
    module: nn.Module | list[nn.Module],
    *,
    mesh=None,
    reshard_after_forward: bool | int | None = None,
    shard_placement_fn=None,
    mp_policy: MixedPrecisionPolicy = _NO_MIXED_PRECISION,
    offload_policy: OffloadPolicy = _NO_OFFLOAD,
    ignored_params: set[nn.Parameter] | None = None,
    process_group=None,
):
    """Shard the parameters of ``module`` (or of a list of modules: one unit) that no inner
    ``fully_shard`` took, across the group; returns ``module``.

    ``reshard_after_forward``: free after forward (``True``), keep whole (``False``), sharded
    over k ranks (an int, ``post_forward.py``), or ``None`` (the root keeps, the others
    free). ``mesh``: 1-D, or 2-D ``(replicate, shard)`` for HSDP. ``shard_placement_fn``:
    parameter -> ``Shard(dim)`` or None (dim 0). ``offload_policy=CPUOffloadPolicy()``: the
    shards live in host memory. ``ignored_params``: whole, never gathered nor reduced."""
    modules = _modules(module)
    for m in modules:
        if unit_of(m) is not None:
            raise ValueError(
                f"fully_shard: this {type(m).__name__} is wrapped already — call "
                "fully_shard once per module (submodules first, then the root)"
            )
    names, params, locations = _owned_parameters(modules, _ids(ignored_params))
    tied = _check_not_taken(modules[0], names, params)
    _check_dense(modules)
    group, replicate = _mesh_groups(mesh, process_group)
    collectives.check_collectives(group)
    auto = reshard_after_forward is None
    reshard = post_forward.check(reshard_after_forward, group.size())
    device = _move_to_mesh_device(mesh, modules, params)
    _check_same_structure(modules[0], names, params, group)
    torch_mesh = dtensor.torch_mesh(mesh, group, replicate, params)
    layouts = make_layouts(params, names, torch_mesh, group, shard_placement_fn)
    offload = hasattr(offload_policy, "pin_memory")  # CPUOffloadPolicy (minidp's or torch's)
    owned = (names, params, locations)
    unit = FSDPUnit(modules, owned, group, torch_mesh, layouts, reshard, mp_policy, offload, device)
    unit.replicate_group = replicate
    unit.auto_reshard = auto  # None: the root keeps its parameters after forward (FSDP2)
    unit.refusal = tied  # raised at the first forward, where FSDP2 raises it
    if not isinstance(reshard, bool):  # an int k: the k-rank groups (all ranks)
        unit.post_group = post_forward.make_group(post_forward.mesh_ranks(mesh, group), reshard)
    for name, p in zip(names, params):  # originals a later unit may still reach: tied ones
        setattr(p, _TAKEN, f"{type(modules[0]).__name__}.{name}")
    for p in unit.sharded:  # a later fully_shard on a submodule would find these
        setattr(p, _SHARDED_BY, type(modules[0]).__name__)
    for m in modules:
        m.__dict__[UNIT_ATTR] = unit
        hooks.register(m)
        m.__class__ = fsdp_class(type(m))  # FSDP2's methods: unshard, reshard, ...
    return module


fully_shard.state = introspect.state_of  # FSDP2's ``fully_shard.state(module)``


def register_fsdp_forward_method(module: nn.Module, method_name: str) -> None:
    """Run ``module.<method_name>`` (called instead of ``forward``, e.g. a ViT's
    ``forward_features``) inside the unit's forward hooks, as FSDP2's function does."""
    if unit_of(module) is None:
        raise ValueError(
            f"register_fsdp_forward_method: expected a module wrapped with fully_shard, got "
            f"{type(module).__name__}. Hint: call fully_shard(module) first"
        )
    method = getattr(module, method_name)

    def wrapped(*args, **kwargs):
        args, kwargs = hooks.pre_forward(module, args, kwargs)
        return hooks.post_forward(module, args, method(*args, **kwargs))

    setattr(module, method_name, wrapped)


def _modules(module) -> list[nn.Module]:
    mods = list(module) if isinstance(module, (list, tuple)) else [module]
    for m in mods:
        if not isinstance(m, nn.Module):
            raise TypeError(
                f"fully_shard: expected an nn.Module or a list of them, got {type(m).__name__}"
            )
        if isinstance(m, (nn.ModuleList, nn.ModuleDict)) and type(m).forward is nn.Module.forward:
            raise ValueError(
                f"fully_shard does not support containers that do not implement forward: {m} "
                "— Hint: wrap each module in it, e.g. for block in model.layers: "
                "fully_shard(block)"
            )
    if not mods:
        raise ValueError("fully_shard: expected at least one module, got an empty list")
    return mods


def _mesh_groups(mesh, process_group):
    """(shard group, replicate group or None) from ``mesh=`` or ``process_group=``."""
    if mesh is None:
        return groups.resolve(process_group), None
    if process_group is not None:
        raise ValueError(
            "fully_shard: expected mesh= or process_group=, got both. Hint: pass the mesh only"
        )
    if mesh.ndim not in (1, 2):
        raise ValueError(
            f"fully_shard expects a 1D or 2D DeviceMesh but got {mesh} — a {mesh.ndim}-D "
            "mesh. Hint: 1-D for FSDP, 2-D (replicate, shard) for HSDP"
        )
    if mesh.ndim == 1:
        return mesh.get_group(0), None
    if mesh.mesh_dim_names is None:
        raise AssertionError(
            "Please init the 2D mesh for HSDP with mesh_dim_names specified, e.g. "
            'init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))'
        )
    return mesh.get_group(1), mesh.get_group(0)  # FSDP2's order: (replicate, shard)


def _move_to_mesh_device(mesh, modules, params) -> torch.device:
    """A torch mesh names the device: parameters and buffers move there (FSDP2's rule;
    meta stays meta). Otherwise the parameters' own device."""
    kind = getattr(mesh, "device_type", None)
    if kind is None:
        found = [p.device for p in params if p.device.type != "meta"]
        return found[0] if found else torch.device("cpu")
    if kind == "cpu":
        device = torch.device("cpu")
    else:  # FSDP2's: the mesh's device type, its current device
        device = torch.device(kind, torch.get_device_module(kind).current_device())
    tensors = list(params) + [b for m in modules for b in m.buffers()]
    for t in tensors:
        if t.device != device and t.device.type != "meta" and not isinstance(t, dtensor.DTensor):
            t.data = t.to(device)
    return device


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


def _owned_parameters(modules: list[nn.Module], ignored: set[int] = frozenset()):
    """Names, params, locations under ``modules``, outside wrapped submodules and ``ignored``,
    in FSDP2's order (each module's subtree after its children: it fixes the flat layout)."""
    names, params, locations, index = [], [], [], {}
    seen: set[int] = set()  # a submodule reached twice (shared): its parameters once
    wrapped: list[tuple[str, nn.Module]] = []

    def visit(prefix: str, m: nn.Module) -> None:
        if id(m) in seen:
            return
        seen.add(id(m))
        for child_name, child in m.named_children():
            if unit_of(child) is None:
                visit(f"{prefix}{child_name}.", child)
            else:
                wrapped.append((f"{prefix}{child_name}", child))
        for attr, p in m.named_parameters(recurse=False, remove_duplicate=False):
            if id(p) in ignored:
                continue
            if p.dim() == 0:
                raise ValueError(
                    "fully_shard doesn't support scalar parameters. Change "
                    f"{attr} to a 1D tensor with numel equal to 1. ({prefix}{attr} is 0-dim: "
                    "FSDP shards along a dim. Hint: nn.Parameter(torch.tensor([value])))"
                )
            if id(p) not in index:
                index[id(p)] = len(params)
                names.append(prefix + attr)
                params.append(p)
                locations.append([])
            locations[index[id(p)]].append((m, attr))

    for k, m in enumerate(modules):
        visit(f"{k}." if len(modules) > 1 else "", m)
    for name, child in wrapped:  # a parameter both here and in a wrapped child: both can't own it
        if any(id(p) in index for p in child.parameters()):
            raise ValueError(
                f"fully_shard: {name} is wrapped already but shares a parameter with its "
                "parent's own parameters — wrap the parent only, or untie the weights"
            )
    return names, params, locations


def _check_not_taken(module: nn.Module, names, params) -> ValueError | None:
    """A parameter tied across two units would be silently untied: FSDP2's ValueError (to
    raise at the first forward, as FSDP2). One already a shard of another unit: refused now
    (FSDP2 refuses this call too, with a TypeError from inside)."""
    for name, p in zip(names, params):
        label = getattr(p, _SHARDED_BY, None)
        if label is not None:  # all of them a parent's shards: wrapped after its parent
            if all(getattr(q, _SHARDED_BY, None) == label for q in params):
                raise ValueError(
                    f"fully_shard: {type(module).__name__}'s parameter '{name}' is already a "
                    f"shard of an enclosing unit ({label}): wrap the submodules first, then "
                    "the root (for block in model.blocks: fully_shard(block); then "
                    "fully_shard(model))"
                )
            raise TypeError(  # a submodule two blocks share (FSDP2 raises a TypeError too)
                f"fully_shard: {type(module).__name__}'s parameter '{name}' is already a "
                f"shard of another unit ({label}): a submodule shared by both. Hint: give "
                "the shared submodule a unit of its own first (fully_shard(shared), then "
                "the blocks, then the root), or wrap only a module that holds both blocks"
            )
        owner = getattr(p, _TAKEN, None)
        if owner is not None:
            return ValueError(
                f"fully_shard: Parameter '{name}' of {type(module).__name__} is shared with a "
                f"parameter already managed by another FSDP group ({owner}). Tied parameters "
                "must be in one unit: wrap a module that holds both sides, e.g. "
                "fully_shard([model.tok_embeddings, model.output])"
            )
    return None


def _check_dense(modules) -> None:
    for module in modules:
        for name, m in module.named_modules():
            if getattr(m, "sparse", False) is True:
                raise ValueError(
                    f"fully_shard: {name or type(m).__name__} ({type(m).__name__}) makes "
                    "sparse gradients, but FSDP reduce-scatters dense gradients — use "
                    "sparse=False"
                )


def _check_same_structure(module, names, params, group) -> None:
    """All-gather (crc32 of names/shapes/dtypes, #params, #elements); raise on a mismatch."""
    text = ";".join(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in zip(names, params))
    numel = sum(p.numel() for p in params)
    fingerprint = [zlib.crc32(text.encode()), len(params), numel]
    # on the host, explicitly: fully_shard may run under torch.device("meta")
    mine = torch.tensor(fingerprint, dtype=torch.int64, device="cpu")
    everyone = [torch.empty_like(mine) for _ in range(group.size())]
    collectives.gather_list(everyone, mine, group)
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
