"""Which memory a backend can send from: gloo reads host memory, NCCL reads GPU memory.

Test: ``pytest tests/test_comm_device.py`` (and ``pytest -m gpu`` on a machine with CUDA)

torch's gloo *collectives* copy CUDA tensors through the host, but its ``send``/``recv``
abort on them ("Bad address"); two ranks on one GPU must use gloo (NCCL refuses them). So
:func:`carrier` stages a CUDA tensor through the host on gloo, and minidp's own host
tensors (headers) through the GPU on NCCL; ``"cpu:gloo,cuda:nccl"`` needs no copy. A copy
changes no bits: results stay ``torch.equal`` to torch's.
"""

from __future__ import annotations

import weakref

import torch
import torch.distributed as dist

# group -> its backend string; weak keys: a finished world's group is not kept alive
_backends: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def backend_of(group) -> str:
    """The group's backend as ``dist.get_backend`` spells it; a bare gloo group is
    ``"gloo"``, any other object (a wrapper that allows only send and recv) ``"unknown"``."""
    try:
        return _backends[group]
    except (KeyError, TypeError):
        pass
    nccl = getattr(dist, "ProcessGroupNCCL", None)  # absent from CPU builds
    if isinstance(group, dist.ProcessGroup):
        try:
            name = str(dist.get_backend(group)).lower()
        except (ValueError, RuntimeError, KeyError):  # a group outside torch's registry
            name = str(group.name()).lower()
    elif isinstance(group, dist.ProcessGroupGloo):
        name = "gloo"
    elif nccl is not None and isinstance(group, nccl):
        name = "nccl"
    else:
        name = "unknown"
    try:
        _backends[group] = name
    except TypeError:  # not weak-referenceable: look it up each time
        pass
    return name


def reads(backend: str, device_type: str) -> bool:
    """Can ``backend`` move tensors on ``device_type`` directly? (unknown: trusted)"""
    backend = backend.lower()
    if ":" in backend:  # one backend per device type
        return any(part.split(":")[0] == device_type for part in backend.split(","))
    if backend == "gloo":
        return device_type == "cpu"
    if backend == "nccl":
        return device_type == "cuda"
    return True


def carrier(group, tensor: torch.Tensor) -> torch.device | None:
    """Where ``tensor`` must be copied to travel on ``group``; ``None`` if it can go as is."""
    device_type = tensor.device.type
    backend = backend_of(group)
    if reads(backend, device_type):
        return None
    if device_type != "cpu" and reads(backend, "cpu"):
        return torch.device("cpu")
    if device_type == "cpu" and reads(backend, "cuda"):
        return torch.device("cuda", torch.cuda.current_device())
    raise RuntimeError(
        f"minidp.comm: a {device_type} tensor cannot travel on a {backend!r} group — expected "
        "host tensors on gloo or CUDA tensors on NCCL. Hint: move the tensor with .to(...) "
        "or make the group with a backend for its device"
    )
