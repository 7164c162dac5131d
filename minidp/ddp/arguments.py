"""DDP's constructor arguments, read the way torch reads them: one device per rank, buffers.

Why a file of its own: ``DistributedDataParallel(model, device_ids=[local_rank])`` is the
line in nearly every real GPU script, so minidp takes torch's arguments in torch's order
(``module, device_ids, output_device, dim, broadcast_buffers, init_sync, process_group,
bucket_cap_mb, find_unused_parameters, check_reduction, gradient_as_bucket_view,
static_graph``; torch 2.13–2.15) and refuses what torch refuses, with torch's meaning.
What each decides:

* ``device_ids``: the one device this rank's module lives on. Inputs are moved there
  before the forward (:func:`to_device`), as torch does. Only for a single-device GPU
  module; with a CPU module torch raises a ValueError, and so does minidp.
* ``broadcast_buffers`` / ``forward_sync_buffers``: torch 2.13 renamed the first to the
  second, with one difference — ``forward_sync_buffers=False`` still broadcasts buffers
  once at construction, ``broadcast_buffers=False`` does not.
* ``static_graph=True`` is refused (:func:`check_static_graph` says why and what to use).

Test: ``pytest tests/test_ddp_arguments.py``
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

WHO = "DistributedDataParallel"


def device_ids_for(module: torch.nn.Module, device_ids, output_device) -> list[int] | None:
    """The module's device index as a one-element list, or ``None`` (CPU or no ids given).

    torch's rules: at most one id; ids only for a module whose parameters are all on one
    GPU; ``output_device`` defaults to ``device_ids[0]`` (minidp's output stays where
    the module puts it, as torch's does for a single-device module).
    """
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
    """``(sync buffers before each forward, broadcast buffers at construction)``.

    Both ``None``: both on. ``broadcast_buffers`` is deprecated in torch 2.13+, which warns
    when it is passed; minidp warns the same way.
    """
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
    """``obj`` with every tensor in it on ``device``: tensors, and the tuples, named
    tuples, lists and dicts that hold them (what torch's DDP moves); anything else as is."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.device == device else obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
        return type(obj)(*(to_device(x, device) for x in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return type(obj)((k, to_device(v, device)) for k, v in obj.items())
    return obj
