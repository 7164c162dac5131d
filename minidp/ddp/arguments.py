"""DDP's constructor arguments, read the way torch 2.13-2.15 reads them, refused where it refuses.

``device_ids`` is the one GPU this rank's module is on (inputs move there: :func:`to_device`;
ids with a CPU module are a ValueError, as in torch). ``forward_sync_buffers=False`` (torch
2.13's new name for ``broadcast_buffers``) still broadcasts buffers once at construction,
``broadcast_buffers=False`` does not. ``static_graph=True`` is refused (see why in
:func:`check_static_graph`).

Test: ``pytest tests/test_ddp_arguments.py``
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

WHO = "DistributedDataParallel"


def device_ids_for(module: torch.nn.Module, device_ids, output_device) -> list[int] | None:
    """The module's GPU index as a one-element list, or ``None`` (CPU, or no ids): torch's
    rules, at most one id and only for a one-GPU module (the output stays where it is)."""
    if device_ids is not None and not isinstance(device_ids, (list, tuple)):
        raise TypeError(
            f"{WHO}: device_ids must be a list of one device (e.g. [local_rank]) or None, got "
            f"{device_ids!r}. Hint: DistributedDataParallel(model, device_ids=[local_rank])"
        )
    if device_ids is not None and len(device_ids) > 1:
        raise ValueError("device_ids can only be None or contain a single element.")
    devices = {p.device for p in module.parameters()}
    if not device_ids or {d.type for d in devices} == {"cpu"}:
        if device_ids or output_device:  # torch's words, so a search for them finds both
            raise ValueError(
                f"{WHO} device_ids and output_device arguments only work with "
                "single-device/multiple-device GPU modules or CPU modules, but got "
                f"device_ids {device_ids}, output_device {output_device}, and module "
                f"parameters {devices}. Hint: on CPU leave device_ids out; on a GPU move "
                "the model first: model.to(local_rank)"
            )
        return None
    return [_index(device_ids[0])]


def group_of(process_group, device_mesh):
    """The group to reduce over: ``process_group``, or a 1-D ``device_mesh``'s (torch's rules)."""
    if process_group is not None and device_mesh is not None:
        raise RuntimeError("Cannot specify both process_group and device_mesh arguments.")
    if device_mesh is None:
        return process_group
    if device_mesh.ndim != 1:
        raise RuntimeError(
            f"Only 1D device mesh is supported, but got {device_mesh}. Hint: pass one "
            "dimension of it, e.g. mesh['replicate']"
        )
    return device_mesh.get_group(mesh_dim=0)


def _index(device) -> int:
    """``0``, ``"cuda:0"`` or ``torch.device("cuda", 0)`` -> ``0`` (as torch reads device ids)."""
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return device.index if device.index is not None else torch.cuda.current_device()


def buffer_sync(broadcast_buffers: bool | None, forward_sync_buffers: bool | None) -> tuple:
    """``(sync buffers before each forward, broadcast at construction)``; both ``None``: both.
    Passing ``broadcast_buffers`` warns, as torch 2.13+ does (it is deprecated there)."""
    if broadcast_buffers is not None:
        warnings.warn(
            "`broadcast_buffers` is deprecated (torch 2.13+). Use `forward_sync_buffers` "
            "instead; unlike `broadcast_buffers=False`, `forward_sync_buffers=False` still "
            "syncs buffers at init"
            + ("; `broadcast_buffers` is ignored" if forward_sync_buffers is not None else ""),
            FutureWarning,
            stacklevel=3,
        )
    if forward_sync_buffers is not None:
        return bool(forward_sync_buffers), True
    on = True if broadcast_buffers is None else bool(broadcast_buffers)
    return on, on


def check_static_graph(static_graph: bool) -> None:
    """``static_graph=True`` changes when and how often hooks fire; minidp does not follow it."""
    if static_graph:
        raise NotImplementedError(
            f"{WHO}: static_graph=True is not implemented in minidp — expected "
            "static_graph=False. torch's static graph delays the first iteration's "
            "all-reduce to the end of backward, finds unused parameters once, and lets a "
            "parameter's gradient hook fire several times per backward (reentrant "
            "checkpointing). Hint: drop static_graph=True — for a model that uses every "
            "parameter and no reentrant checkpointing, torch's default gives the same numbers "
            "(tests/test_ddp_arguments.py checks that on torch); for unused parameters pass "
            "find_unused_parameters=True"
        )


def check_reduction_flag(check_reduction: bool) -> None:
    """torch ignores ``check_reduction`` and warns that it is deprecated; so does minidp."""
    if check_reduction:
        warnings.warn(
            "The `check_reduction` argument in `DistributedDataParallel` module is deprecated. "
            "Please avoid using it.",
            FutureWarning,
            stacklevel=3,
        )


def to_device(obj: Any, device: torch.device) -> Any:
    """``obj`` with every tensor in it (in tuples, named tuples, lists, dicts) on ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.device == device else obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return type(obj)(*(to_device(x, device) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return type(obj)((k, to_device(v, device)) for k, v in obj.items())
    return obj
