"""How a shard is *described* to torch: a ``DTensor`` over a torch ``DeviceMesh``, as FSDP2 does.

Each sharded parameter is ``DTensor.from_local(rows, mesh, Shard(0))`` (HSDP:
``(Replicate(), Shard(0))``) over the shard's own storage, so torch's APIs answer on a
minidp model (``full_tensor()``, ``clip_grad_norm_``'s global norm, DCP) while training runs
minidp's collectives, as FSDP2 runs its own. The mesh: the one passed, else one over the
unit's groups (``from_group``); a thread world has none (``PLAIN_SHARDS``).

Test: ``pytest tests/test_fsdp_dtensor.py``
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
    """Shards on a thread world's groups are plain tensors (PLAIN_SHARDS); filter by class."""


PLAIN_SHARDS = (
    "sharding on groups torch.distributed does not know (a thread world from "
    "minidp.launch.run_threads): the shards are plain tensors, so torch's DTensor APIs see "
    "only this rank's rows — clip_grad_norm_ returns this rank's norm, not the global one; "
    "full_tensor() and DCP state dicts are not there; ZeRO-2's freed gradients are None. "
    "Run the ranks as processes (minidp.launch.spawn, torchrun) where those are used"
)


def local(t: torch.Tensor | None) -> torch.Tensor | None:
    """This rank's plain tensor: a DTensor's local shard, anything else as it is."""
    return t.to_local() if isinstance(t, DTensor) else t


def device_type(params: list[torch.Tensor], group) -> str:
    """The mesh's device type: the parameters' (not meta), else the backend's."""
    for p in params:
        if p.device.type != "meta":
            return p.device.type
    backend = str(dist.get_backend(group))
    if backend not in _BACKEND_DEVICE:
        raise ValueError(
            f"fully_shard: expected parameters on a device, or a gloo/nccl group, to choose "
            f"the mesh's device; got meta parameters and backend {backend!r}. Hint: pass "
            "mesh=torch.distributed.device_mesh.init_device_mesh(<device>, (world,))"
        )
    return _BACKEND_DEVICE[backend]


def torch_mesh(mesh, group, replicate, params: list[torch.Tensor]) -> DeviceMesh | None:
    """The torch DeviceMesh the shards are described on, or None (no torch process groups)."""
    if isinstance(mesh, DeviceMesh):
        return mesh
    groups = (group,) if replicate is None else (replicate, group)
    if not dist.is_initialized() or not all(isinstance(g, dist.ProcessGroup) for g in groups):
        if group.size() > 1:  # a thread world's group (or a stand-in): plain shards
            warnings.warn(PLAIN_SHARDS, PlainShardsWarning, stacklevel=3)
        return None
    grid = None if replicate is None else tuple(map(tuple, mesh.mesh.tolist()))
    return _from_groups(groups, device_type(params, group), grid)


@functools.cache
def _from_groups(groups: tuple, device: str, grid: tuple | None) -> DeviceMesh:
    """One mesh per set of groups (DTensor compares meshes); ``grid``: HSDP's global ranks."""
    if grid is None:
        return DeviceMesh.from_group(groups[0], device)
    return DeviceMesh.from_group(
        list(groups), device, mesh=torch.tensor(grid), mesh_dim_names=("replicate", "shard")
    )


def placements(mesh: DeviceMesh) -> tuple:
    """FSDP2's placements: ``Shard(0)`` on a 1-D mesh, ``(Replicate(), Shard(0))`` on HSDP."""
    return (Shard(0),) if mesh.ndim == 1 else (Replicate(), Shard(0))


def as_sharded(rows: torch.Tensor, mesh: DeviceMesh | None, full_shape) -> torch.Tensor:
    """``rows`` (this rank's dim-0 piece) as a ``full_shape`` DTensor (same storage), or as is."""
    if mesh is None:
        return rows
    stride = torch.empty(full_shape, device="meta").stride()  # the full tensor, contiguous
    return DTensor.from_local(
        rows, mesh, placements(mesh), run_check=False, shape=torch.Size(full_shape), stride=stride
    )


def repoint(param: torch.nn.Parameter, rows: torch.Tensor, mesh: DeviceMesh | None) -> None:
    """Make ``param`` (the same object) hold ``rows``: as ``.data``, or by ``swap_tensors``."""
    if not isinstance(param, DTensor):
        param.data = rows
        return
    fresh = torch.nn.Parameter(as_sharded(rows, mesh, param.shape), param.requires_grad)
    fresh.__dict__.update(param.__dict__)
    grad, param.grad = param.grad, None
    torch.utils.swap_tensors(param, fresh)
    param.grad = grad
