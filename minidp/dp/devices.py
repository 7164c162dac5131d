"""Device ids for DataParallel: CUDA indices, ``torch.device``s, or simulated CPU devices.

Test: ``pytest tests/test_dp_data_parallel.py -k device``

Besides torch's CUDA indices, ``"cpu"`` may repeat: ``["cpu"] * 4`` is four *simulated*
devices (slots), four replicas on four threads sharing the machine's memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

DeviceLike = int | str | torch.device

_NO_GPU_HINT = "on a machine without GPUs simulate n devices with device_ids=['cpu'] * n"


def gpu_count() -> int:
    """How many CUDA devices this process can see (0 without a CUDA build or driver)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def as_device(device: DeviceLike) -> torch.device:
    """Turn a device id into a ``torch.device``: ``1`` -> ``cuda:1``, ``"cpu"`` -> ``cpu``."""
    if isinstance(device, bool) or not isinstance(device, int | str | torch.device):
        raise ValueError(
            f"DataParallel: expected a device id (int, str or torch.device) but got "
            f"{device!r} of type {type(device).__name__} — use e.g. 0, 'cuda:1' or 'cpu'"
        )
    # A bare int means a CUDA index, as in torch.nn.DataParallel.
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if dev.type == "cpu":
        # CPU tensors always report plain 'cpu'; an index such as 'cpu:1' would never match.
        return torch.device("cpu")
    if dev.type != "cuda":
        raise ValueError(
            f"DataParallel: expected a CUDA or CPU device but got {dev} — "
            f"use CUDA indices, or 'cpu' to simulate devices"
        )
    count = gpu_count()
    if count == 0:
        raise RuntimeError(
            f"DataParallel: device {device!r} is a CUDA device but torch.cuda.device_count() "
            f"is 0 — {_NO_GPU_HINT}"
        )
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if not 0 <= index < count:
        raise RuntimeError(
            f"DataParallel: expected a CUDA index in 0..{count - 1} but got {device!r} — "
            f"this process sees {count} GPU(s); check CUDA_VISIBLE_DEVICES"
        )
    return torch.device("cuda", index)


def as_devices(device_ids: Sequence[DeviceLike]) -> list[torch.device]:
    """Normalise a non-empty list of device ids, all CUDA or all CPU."""
    if isinstance(device_ids, str | int | torch.device):
        raise ValueError(
            f"DataParallel: expected a list of device ids but got {device_ids!r} — "
            f"wrap it in a list, e.g. device_ids=[{device_ids!r}]"
        )
    devices = [as_device(d) for d in device_ids]
    if not devices:
        raise ValueError(
            "DataParallel: expected at least one device but got device_ids=[] — "
            "pass device_ids=None for every visible GPU, or ['cpu'] * n to simulate n devices"
        )
    types = sorted({d.type for d in devices})
    if len(types) > 1:
        raise ValueError(
            f"DataParallel: expected devices of one type but got {types} in "
            f"device_ids={list(device_ids)!r} — use only CUDA devices, or only 'cpu' to simulate"
        )
    return devices


def slot_label(devices: Sequence[torch.device], slot: int) -> str:
    """A readable name for replica ``slot``: ``cuda:1``, or ``cpu #1`` for simulated slots."""
    device = devices[slot]
    if list(devices).count(device) > 1:
        return f"{device} #{slot}"
    return str(device)


def official_data_parallel(module: torch.nn.Module, devices: Sequence[torch.device]):
    """torch's ``DataParallel`` on the same devices, to compare; on simulated ``"cpu"`` ones
    the plain module (torch's wrapper without a GPU; on a GPU machine it would refuse)."""
    devices = [torch.device(d) for d in devices]
    if all(d.type == "cpu" for d in devices):
        return module
    return torch.nn.DataParallel(module, device_ids=[as_device(d).index for d in devices])
