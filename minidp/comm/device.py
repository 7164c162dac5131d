"""Which memory a backend can send from: gloo reads host memory, NCCL reads GPU memory.

Test: ``pytest tests/test_comm_device.py`` (and ``pytest -m gpu`` on a machine with CUDA)

Every message minidp sends goes through ``p2p.isend``/``irecv`` with the group's own
``send``/``recv``. What the backend does with the tensor's pointer decides where the
tensor must live:

* **gloo** writes the bytes to a socket straight from the pointer, so the pointer must be
  host memory. torch's gloo *collectives* (``dist.all_reduce`` on CUDA tensors) copy
  through host memory themselves; its point-to-point ``send``/``recv`` do not: given a CUDA
  tensor, gloo's ``writev`` fails with "Bad address" and the process aborts. Two ranks
  sharing one GPU (the usual one-GPU classroom) must use gloo — NCCL refuses two ranks on
  one device — so minidp copies a CUDA tensor to host memory before sending it, and
  receives into host memory before copying into the CUDA tensor (``carrier``).
* **NCCL** moves GPU memory only: a CUDA tensor travels as it is. A host tensor (the
  collectives' own small headers) is copied to the current GPU first. torch's NCCL
  refuses host tensors outright; minidp's headers are its own business, so it stages
  them instead of making every caller allocate them on the GPU.
* A group made with one backend per device type (``"cpu:gloo,cuda:nccl"``) sends host
  tensors with gloo and CUDA tensors with NCCL: nothing to copy.

The copies change no bits (a copy is a copy), so results stay ``torch.equal`` to torch's.
"""

from __future__ import annotations

import weakref

import torch
import torch.distributed as dist

# group -> its backend string ("gloo", "nccl", "cpu:gloo,cuda:nccl"); weak keys: a finished
# world's group is not kept alive by this cache
_backends: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def backend_of(group) -> str:
    """The group's backend as torch spells it (``dist.get_backend``): ``"gloo"``, ``"nccl"``,
    ``"cpu:gloo,cuda:nccl"``. A bare gloo group (a thread world's rank) is ``"gloo"``; any
    other object (a wrapper, such as the exercise checker's learner group, which allows
    nothing but send and recv) is ``"unknown"``: trusted with what it is given, and never
    asked anything else."""
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
    """Can ``backend`` send and receive tensors on ``device_type`` directly?

    ``"gloo"`` reads host memory, ``"nccl"`` GPU memory; ``"cpu:gloo,cuda:nccl"`` names one
    backend per device type. An unknown backend is trusted with what it is given.
    """
    backend = backend.lower()
    if ":" in backend:  # one backend per device type
        return any(part.split(":")[0] == device_type for part in backend.split(","))
    if backend == "gloo":
        return device_type == "cpu"
    if backend == "nccl":
        return device_type == "cuda"
    return True


def carrier(group, tensor: torch.Tensor) -> torch.device | None:
    """Where ``tensor``'s bytes must be to travel on ``group``: ``None`` if they can go as
    they are, else the device to copy them to (host memory for gloo, the current GPU for
    NCCL)."""
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
