"""How a shard is *described* to torch: a ``DTensor`` over a torch ``DeviceMesh``, as FSDP2 does.

Each sharded parameter is ``DTensor.from_local(rows, mesh, (Shard(d),))`` (HSDP:
``(Replicate(), Shard(d))``; a parameter that already was a DTensor of tensor parallelism:
its placements after FSDP's, on the two meshes side by side) over the shard's own storage,
so torch's APIs answer on a minidp model (``full_tensor()``, ``clip_grad_norm_``'s global
norm, DCP) while training runs minidp's collectives, as FSDP2 runs its own. The mesh: the
one passed, else one over the unit's groups (``from_group``; a group wrapped by
``minidp.trace.tap`` is described by the torch group it wraps); a thread world has none
(``PLAIN_SHARDS``).

Test: ``pytest tests/test_fsdp_dtensor.py tests/test_fsdp_moves.py``
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.distributed as dist

try:  # public from torch 2.5; torch 2.4 has the same classes under a private name
    from torch.distributed.tensor import DTensor, Replicate, Shard
except ImportError:  # pragma: no cover - torch 2.4
    from torch.distributed._tensor import DTensor, Replicate, Shard
from torch.distributed.device_mesh import DeviceMesh

from minidp.comm.device import backend_of

__all__ = [
    "DTensor",
    "DeviceMesh",
    "Replicate",
    "Shard",
    "as_sharded",
    "local",
    "repoint",
    "torch_mesh",
]

_BACKEND_DEVICE = {"gloo": "cpu", "nccl": "cuda"}


class PlainShardsWarning(UserWarning):
    """Shards on groups torch.distributed does not know are plain tensors; filter by class."""


PLAIN_SHARDS = (
    "sharding on groups torch.distributed does not know ({why}): the shards are plain "
    "tensors, so torch's DTensor APIs see only this rank's rows — clip_grad_norm_ returns "
    "this rank's norm, not the global one; full_tensor() and DCP state dicts are not there; "
    "ZeRO-2's freed gradients are None. Run the ranks as processes (minidp.launch.spawn, "
    "torchrun) where those are used"
)


def local(t: torch.Tensor | None) -> torch.Tensor | None:
    """This rank's plain tensor: a DTensor's local shard, anything else as it is."""
    return t.to_local() if isinstance(t, DTensor) else t


def device_type(params: list[torch.Tensor], group) -> str:
    """The mesh's device type: the parameters' (not meta), else the backend's (gloo: cpu,
    nccl: cuda), else FSDP2's default mesh's: the current accelerator's, else cpu."""
    for p in params:
        if p.device.type != "meta":
            return p.device.type
    backend = backend_of(torch_group(group) or group)
    if backend in _BACKEND_DEVICE:
        return _BACKEND_DEVICE[backend]
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    found = accelerator.current_accelerator() if accelerator is not None else None
    return found.type if found is not None else "cpu"


def torch_group(group):
    """The ``torch.distributed`` group behind ``group``: itself, the one a forwarding wrapper
    (``trace.tap``) stands for, or None (a thread world's own gloo objects)."""
    if isinstance(group, dist.ProcessGroup):
        return group
    boxed = getattr(group, "boxed", None)  # a wrapper forwards it to the group it wraps
    if callable(boxed):
        try:
            return dist.ProcessGroup.unbox(boxed())
        except (RuntimeError, TypeError):
            return None
    return None


def torch_mesh(mesh, group, replicate, params: list[torch.Tensor]) -> DeviceMesh | None:
    """The torch DeviceMesh the shards are described on, or None (no torch process groups)."""
    if isinstance(mesh, DeviceMesh):
        return mesh
    groups = tuple(map(torch_group, (group,) if replicate is None else (replicate, group)))
    if not dist.is_initialized() or any(g is None for g in groups):
        if group.size() > 1:  # nothing to describe the shards with: say why, truly
            why = "a thread world's groups" if not dist.is_initialized() else (
                f"{type(group).__name__} is not a torch.distributed group and wraps none"
            )  # fmt: skip
            warnings.warn(PLAIN_SHARDS.format(why=why), PlainShardsWarning, stacklevel=3)
        return None
    grid = None if replicate is None else tuple(map(tuple, mesh.mesh.tolist()))
    return _from_groups(groups, device_type(params, group), grid)


@functools.cache
def _from_groups(groups: tuple, device: str, grid: tuple | None) -> DeviceMesh:
    """One mesh per set of groups (DTensor compares meshes); ``grid``: HSDP's global ranks."""
    if grid is None:
        return DeviceMesh.from_group(groups[0], device)
    return DeviceMesh.from_group(
        list(groups),
        device,
        mesh=torch.tensor(grid, device="cpu"),
        mesh_dim_names=("replicate", "shard"),
    )


def placements(mesh: DeviceMesh, dim: int = 0) -> tuple:
    """FSDP2's placements: ``Shard(dim)`` on a 1-D mesh, ``(Replicate(), Shard(dim))`` on HSDP."""
    return (Shard(dim),) if mesh.ndim == 1 else (Replicate(), Shard(dim))


def contiguous_stride(shape) -> tuple[int, ...]:
    return torch.empty(shape, device="meta").stride()


def as_sharded(rows: torch.Tensor, mesh: DeviceMesh | None, full_shape, place=None):
    """``rows`` (this rank's piece) as a ``full_shape`` DTensor (same storage), or as is;
    ``place``: its placements (default: FSDP2's dim-0 ones)."""
    if mesh is None:
        return rows
    return DTensor.from_local(
        rows,
        mesh,
        place or placements(mesh),
        run_check=False,
        shape=torch.Size(full_shape),
        stride=contiguous_stride(full_shape),
    )


def repoint(param: torch.nn.Parameter, rows: torch.Tensor, mesh, place=None) -> None:
    """Make ``param`` (the same object) hold ``rows``: as ``.data``, or by ``swap_tensors``."""
    if not isinstance(param, DTensor):
        param.data = rows
        return
    described = as_sharded(rows, mesh, param.shape, place or param.placements)
    fresh = torch.nn.Parameter(described, param.requires_grad)
    fresh.__dict__.update(param.__dict__)
    grad, param.grad = param.grad, None
    torch.utils.swap_tensors(param, fresh)
    param.grad = grad
