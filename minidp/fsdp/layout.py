"""How one parameter is cut and described: FSDP's shard dim, what is gathered, its DTensors.

A plain parameter: FSDP shards it on ``dim`` (``shard_placement_fn``; default 0) and its
shard is a DTensor with FSDP2's placements on the unit's mesh. A parameter that already
is a DTensor (tensor parallelism on another mesh): FSDP shards its *local* tensor over the
data-parallel group; the shard is a DTensor on both meshes side by side, FSDP's placement
first (torch's ``_StridedShard`` where TP cuts the same dim, the only way DTensor can say
"FSDP's rows of TP's rows"), and the unsharded parameter is the TP DTensor again — FSDP2's
layout. The refusals are FSDP2's (same exception classes, same words, then a hint).

Test: ``pytest tests/test_fsdp_moves.py``
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from minidp.fsdp import collectives, dtensor, shard
from minidp.fsdp.dtensor import DeviceMesh, DTensor, Shard

try:  # FSDP2's own placement for a dim two meshes cut (torch names it privately)
    from torch.distributed.tensor.placement_types import _StridedShard
except ImportError:  # pragma: no cover - older torch
    _StridedShard = None


@dataclass
class Layout:
    """Parameter i of a unit: cut on ``dim``; ``shape`` is what FSDP gathers (a TP
    parameter: its local tensor); the shard is a DTensor on ``mesh`` with ``place``."""

    dim: int
    shape: torch.Size
    row_shape: torch.Size  # shape of shard.to_rows(...): the dim chunks stacked on dim 0
    mesh: DeviceMesh | None
    place: tuple | None
    global_shape: torch.Size
    tp: tuple | None = None  # (TP mesh, TP placements) of a parameter that was a DTensor

    def describe(self, rows: torch.Tensor) -> torch.Tensor:
        return dtensor.as_sharded(rows, self.mesh, self.global_shape, self.place)

    def where(self) -> tuple:
        return self.mesh, self.place

    def unsharded(self, t: torch.Tensor) -> torch.Tensor:
        """The unsharded parameter over ``t``: ``t`` itself, or TP's DTensor around it."""
        if self.tp is None:
            return t
        shape = self.global_shape
        return DTensor.from_local(
            t, *self.tp, run_check=False, shape=shape, stride=dtensor.contiguous_stride(shape)
        )

    def local_grad(self, grad: torch.Tensor) -> torch.Tensor:
        """What FSDP reduces of an unsharded gradient: a TP gradient's local tensor."""
        if self.tp is None or not isinstance(grad, DTensor):
            return grad
        if tuple(grad.placements) != tuple(self.tp[1]):
            grad = grad.redistribute(self.tp[0], self.tp[1])
        return grad.to_local()


def _resolve(fn, param, name: str) -> Shard:
    placement = fn(param) if fn is not None else None
    if placement is None:
        return Shard(0)
    if not isinstance(placement, Shard):
        raise AssertionError(
            f"Expected Shard, got {type(placement)}: {placement} — shard_placement_fn "
            f"returned it for {name}; minidp shards on one mesh. Hint: return Shard(dim) or None"
        )
    return Shard(placement.dim + param.ndim) if placement.dim < 0 else placement


def make_layouts(params, names, mesh, group, fn) -> list[Layout]:
    """Each parameter's layout, with FSDP2's checks (``fn``: ``shard_placement_fn``)."""
    world, layouts = group.size(), []
    for param, name in zip(params, names):
        if not param.is_contiguous():
            raise NotImplementedError(
                f"FSDP does not support non-contiguous parameters yet: {param.shape=} "
                f"{param.stride()=} ({name}). Hint: make it contiguous before fully_shard, "
                "e.g. module.to(memory_format=torch.contiguous_format)"
            )
        placement = _resolve(fn, param, name)
        data = dtensor.local(param)
        dim = placement.dim
        if dim >= data.ndim:
            raise AssertionError(
                f"Shard dim {dim} is invalid for {data.ndim}D tensor: {param.shape} ({name}). "
                "Hint: return Shard(d) with d < the parameter's ndim from shard_placement_fn"
            )
        if dim > 0 and data.size(dim) % world != 0:
            raise NotImplementedError(
                f"FSDP does not support uneven sharding on dim {dim}: {data.size()} "
                f"(world size: {world}) — {name}. Hint: shard it on dim 0, or on a dim "
                f"divisible by {world}"
            )
        row_shape = shard.to_rows(torch.empty(data.shape, device="meta"), world, dim).shape
        if isinstance(param, DTensor):
            layouts.append(_tp_layout(param, dim, data, row_shape, mesh, group, name))
        else:
            place = None if mesh is None else dtensor.placements(mesh, dim)
            layouts.append(Layout(dim, data.shape, row_shape, mesh, place, param.shape))
    return layouts


def _tp_layout(p, dim, data, row_shape, mesh, group, name: str) -> Layout:
    """A DTensor parameter (tensor parallel on its own mesh) sharded by FSDP beside it."""
    tp_mesh, tp_place = p.device_mesh, tuple(p.placements)
    if mesh is None or mesh.ndim != 1 or tp_mesh.ndim != 1:
        raise NotImplementedError(
            f"fully_shard: {name} is a DTensor on a {tp_mesh.ndim}-D mesh; minidp shards a "
            "tensor-parallel parameter over a 1-D data-parallel mesh beside a 1-D TP mesh, "
            f"got mesh={mesh}. Hint: pass mesh=global_mesh['dp'] of a (dp, tp) mesh"
        )
    if tp_mesh.device_type != mesh.device_type:
        raise ValueError(
            "Requires DTensor to have mesh of the same type as the FSDP mesh but got "
            f"{tp_mesh.device_type} for DTensor and {mesh.device_type} for FSDP ({name})"
        )
    split = 1
    for size, pl in zip(tp_mesh.shape, tp_place):
        split *= size if isinstance(pl, Shard) and pl.dim == dim else 1
    if split > 1 and _StridedShard is None:  # pragma: no cover - older torch
        raise NotImplementedError(f"fully_shard: this torch cannot describe {name}'s layout")
    first = _StridedShard(dim, split_factor=split) if split > 1 else Shard(dim)
    spmd = _side_by_side(mesh, tp_mesh, group)
    tp = (tp_mesh, tp_place)
    return Layout(dim, data.shape, row_shape, spmd, (first, *tp_place), p.shape, tp)


def _side_by_side(dp_mesh: DeviceMesh, tp_mesh: DeviceMesh, group) -> DeviceMesh:
    """The 2-D (dp, tp) mesh: row i = the TP ranks of data-parallel rank i (gathered)."""
    mine = torch.tensor(tp_mesh.mesh.tolist(), dtype=torch.int64, device="cpu")
    rows = [torch.empty_like(mine) for _ in range(group.size())]
    collectives.gather_list(rows, mine, group)
    grid = tuple(tuple(r.tolist()) for r in rows)
    names = (dp_mesh.mesh_dim_names or ("dp",)) + (tp_mesh.mesh_dim_names or ("tp",))
    return _mesh(dp_mesh.get_group(0), tp_mesh.get_group(0), dp_mesh.device_type, grid, names)


@functools.cache
def _mesh(dp_group, tp_group, device: str, grid: tuple, names: tuple) -> DeviceMesh:
    return DeviceMesh.from_group(
        [dp_group, tp_group], device, mesh=torch.tensor(grid, device="cpu"), mesh_dim_names=names
    )
