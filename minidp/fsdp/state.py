"""The whole model from its shards, and back: full state dicts and per-rank bytes.

``full_state_dict`` is a collective (``{name: full tensor}`` on every rank, tied parameters
under their first name); ``load_full_state_dict`` copies this rank's dim-0 chunks, from a
save at any world size. ``model.state_dict()`` holds the DTensor shards, for DCP.

Test: ``pytest tests/test_fsdp.py -k state``
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from minidp.comm import Traffic
from minidp.fsdp import shard
from minidp.fsdp.dtensor import local
from minidp.fsdp.wrap import unit_of


def _units(model: nn.Module):
    """(prefix, unit) for every unit in ``model``, in module order."""
    units = [(f"{n}." if n else "", u) for n, m in model.named_modules() if (u := unit_of(m))]
    if not units:
        raise ValueError(
            f"{type(model).__name__} has no fully_shard units — call minidp.fully_shard first"
        )
    return units


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """``{name: full tensor}`` of every parameter and buffer, on every rank (a collective)."""
    gathered: dict[str, torch.Tensor] = {}
    for prefix, unit in _units(model):
        unit.adopt()
        for name, full in zip(unit.names, unit.gather_full(unit.dtype)):
            gathered[prefix + name] = full
    out = {  # the model's order; a parameter no unit owns is whole on every rank already
        name: gathered[name] if name in gathered else p.detach().clone()
        for name, p in model.named_parameters()
    }
    for name, buf in model.named_buffers():
        out[name] = buf.detach().clone()
    return out


@torch.no_grad()
def load_full_state_dict(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy this rank's chunk of every full parameter (and every buffer) from ``state``."""
    sharded = set()
    for prefix, unit in _units(model):
        unit.adopt()  # after load_state_dict(assign=True): load into what the module holds
        for i, (name, shape) in enumerate(zip(unit.names, unit.shapes)):
            key = prefix + name
            start = min(unit.rank * shard.shard_rows(shape[0], unit.world), shape[0])
            mine = unit.local(i)
            mine.copy_(_get(state, key, shape)[start : start + mine.shape[0]])
            sharded.add(key)
    for name, p in model.named_parameters():  # parameters no unit owns: whole everywhere
        if name not in sharded:
            p.copy_(_get(state, name, p.shape))
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
    root = _units(model)[0][1].root
    return dataclasses.replace(root.traffic) if root is not None else Traffic()


def sharded_bytes(model: nn.Module) -> dict[str, int]:
    """This rank's bytes: ``params``, ``grads``, ``gathered`` now, ``peak_gathered`` last step."""
    params = grads = gathered = 0
    units = _units(model)
    root = units[0][1].root
    for _, unit in units:
        params += sum(p.nbytes for p in unit.padded)
        grads += sum(local(p.grad).nbytes for p in unit.sharded if p.grad is not None)
        gathered += sum(p.untyped_storage().nbytes() for p in unit.full)
    peak = root.peak_gathered if root is not None else 0
    return {"params": params, "grads": grads, "gathered": gathered, "peak_gathered": peak}
