"""The whole model from its shards, and back: full state dicts and per-rank bytes.

``full_state_dict`` is a collective (``{name: full tensor}`` on every rank, tied parameters
under their first name); ``load_full_state_dict`` copies this rank's pieces (its chunk on
the parameter's shard dim), from a save at any world size. ``model.state_dict()`` holds
the DTensor shards, for DCP.

Test: ``pytest tests/test_fsdp.py -k state``
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from minidp.comm import Traffic
from minidp.fsdp.dtensor import DTensor, local
from minidp.fsdp.unit import unit_of

try:  # public from torch 2.5
    from torch.distributed.tensor import distribute_tensor
except ImportError:  # pragma: no cover - torch 2.4
    from torch.distributed._tensor import distribute_tensor


def _units(model: nn.Module) -> list:
    """Every unit in ``model``, once (a group's unit serves several modules), module order."""
    units = []
    for m in model.modules():
        if (u := unit_of(m)) is not None and u not in units:
            units.append(u)
    if not units:
        raise ValueError(
            f"{type(model).__name__} has no fully_shard units — call minidp.fully_shard first"
        )
    return units


def _owners(units) -> dict[int, tuple]:
    """id(parameter) -> (unit, i), for the shards and for the full parameters (gathered)."""
    owners = {}
    for u in units:
        u.adopt()  # after load_state_dict(assign=True): what the module holds now
        for i, p in enumerate(u.sharded):
            owners[id(p)] = (u, i)
        for i, p in enumerate(u.full):
            owners[id(p)] = (u, i)
    return owners


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``{name: full tensor}`` of every parameter and buffer, on every rank (a collective)."""
    units = _units(model)
    owners = _owners(units)
    gathered = {id(u): u.gather_full(None) for u in units}  # each in its own dtype
    out = {}  # the model's order; a parameter no unit owns is whole on every rank already
    for name, p in model.named_parameters():
        if id(p) not in owners:
            out[name] = p.detach().clone()
            continue
        unit, i = owners[id(p)]
        full = unit.layouts[i].unsharded(gathered[id(unit)][i])
        out[name] = full.full_tensor() if isinstance(full, DTensor) else full
    for name, buf in model.named_buffers():
        out[name] = buf.detach().clone()
    return out


@torch.no_grad()
def load_full_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy this rank's piece of every full parameter (and every buffer) from ``state``."""
    owners = _owners(_units(model))
    for name, p in model.named_parameters():
        if id(p) not in owners:  # a parameter no unit owns: whole everywhere
            p.copy_(_get(state, name, p.shape))
            continue
        unit, i = owners[id(p)]
        lay = unit.layouts[i]
        full = _get(state, name, lay.global_shape)
        if lay.tp is not None:  # this rank's tensor-parallel piece first
            full = distribute_tensor(full, *lay.tp).to_local()
        unit.local(i).copy_(unit.shard_of(i, full))
    for name, buf in model.named_buffers():
        if name in state:
            buf.copy_(state[name])


def _get(state: dict[str, torch.Tensor], key: str, shape: torch.Size) -> torch.Tensor:
    if key not in state:
        raise KeyError(
            f"load_full_state_dict: {key!r} is missing; the state has "
            f"{sorted(state)[:8]}... — save it with minidp.fsdp.full_state_dict"
        )
    if state[key].shape != shape:
        raise ValueError(
            f"load_full_state_dict: {key} is {tuple(state[key].shape)} in the state "
            f"but {tuple(shape)} in the model"
        )
    return state[key]


def traffic(model: nn.Module) -> Traffic:
    """What this rank's FSDP collectives moved since the first forward (a running total)."""
    root = _units(model)[0].root
    return dataclasses.replace(root.traffic) if root is not None else Traffic()


def sharded_bytes(model: nn.Module) -> dict[str, int]:
    """This rank's own bytes (its storages, padding included; not DTensor's global sizes):
    ``params``, ``grads``, ``gathered`` now, ``peak_gathered`` last step."""
    params = gathered = 0
    grad_storages: dict[int, int] = {}  # a unit's gradients view one reduce-scatter output
    units = _units(model)
    root = units[0].root
    for unit in units:
        params += sum(p.nbytes for p in unit.padded)  # rank-local, padded
        for p in unit.sharded:
            if p.grad is not None:  # the padded (T_grad,) buffer its rows live in
                storage = local(p.grad).untyped_storage()
                grad_storages[storage.data_ptr()] = storage.nbytes()
        gathered += sum(p.untyped_storage().nbytes() for p in unit.full_local)
    grads = sum(grad_storages.values())
    peak = root.peak_gathered if root is not None else 0
    return {"params": params, "grads": grads, "gathered": gathered, "peak_gathered": peak}
