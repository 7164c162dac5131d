"""A device mesh: the ranks laid out as a grid, one process group per row and per column.

Test: ``pytest tests/test_hsdp.py -k mesh``

HSDP shards within a row and replicates down a column.
``init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))``::

    mesh.mesh = [[0, 1],      each row:    a "shard" group     {0, 1}, {2, 3}
                 [2, 3]]      each column: a "replicate" group {0, 2}, {1, 3}

Names and the row-major layout are torch's (``init_device_mesh``, ``DeviceMesh``), so a
rank holds the same shard as under FSDP2. Every rank creates every group (torch's rule).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


class DeviceMesh:
    """Ranks in a grid (``mesh``: a tensor of global ranks), and this rank's group per dim."""

    def __init__(self, mesh: torch.Tensor, names: tuple[str, ...] | None, groups: list) -> None:
        self.mesh = mesh  # (d0, d1, ...) global ranks, row-major
        self.mesh_dim_names = names
        self._groups = groups  # per dim: the group along that dim that holds this rank

    @property
    def ndim(self) -> int:
        return self.mesh.dim()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.mesh.shape)

    def size(self, mesh_dim: int | None = None) -> int:
        return self.mesh.numel() if mesh_dim is None else self.mesh.shape[mesh_dim]

    def get_group(self, mesh_dim: int | str | None = None):
        """The process group along ``mesh_dim`` (index or name) that holds this rank."""
        if mesh_dim is None:
            if self.ndim != 1:
                names = self.mesh_dim_names
                by_name = f" or get_group({names[0]!r})" if names else ""
                raise ValueError(
                    f"DeviceMesh.get_group: expected a mesh_dim for this {self.ndim}-D mesh "
                    f"{self.shape}, got none. Hint: get_group(0){by_name}"
                )
            mesh_dim = 0
        return self._groups[self._dim(mesh_dim)]

    def get_local_rank(self, mesh_dim: int | str | None = None) -> int:
        return self.get_group(mesh_dim).rank()

    def __getitem__(self, name: str) -> DeviceMesh:
        """The 1-D mesh along the dimension called ``name`` through this rank."""
        dim = self._dim(name)
        mine = (self.mesh == dist.get_rank()).nonzero()[0].tolist()  # this rank's coordinates
        index = [slice(None) if d == dim else mine[d] for d in range(self.ndim)]
        return DeviceMesh(self.mesh[tuple(index)], (name,), [self._groups[dim]])

    def _dim(self, mesh_dim: int | str) -> int:
        if isinstance(mesh_dim, str):
            if not self.mesh_dim_names or mesh_dim not in self.mesh_dim_names:
                raise KeyError(
                    f"DeviceMesh: expected one of the mesh's dim names "
                    f"{self.mesh_dim_names}, got {mesh_dim!r}. Hint: name them with "
                    "init_device_mesh(..., mesh_dim_names=(...))"
                )
            return self.mesh_dim_names.index(mesh_dim)
        if not isinstance(mesh_dim, int) or not 0 <= mesh_dim < self.ndim:
            raise IndexError(
                f"DeviceMesh: expected a dim in [0, {self.ndim - 1}] or a name, got {mesh_dim!r}"
            )
        return mesh_dim

    def __repr__(self) -> str:
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh({self.mesh.tolist()}{names})"


def init_device_mesh(
    device_type: str,
    mesh_shape: tuple[int, ...],
    *,
    mesh_dim_names: tuple[str, ...] | None = None,
) -> DeviceMesh:
    """Lay the world's ranks out as ``mesh_shape`` (row-major) and make each dim's groups
    (on every rank, after ``init_process_group``)."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "init_device_mesh: expected torch.distributed.init_process_group(...) to have run "
            "(a mesh's rows and columns are torch.distributed groups), got no default group. "
            "Hint: start the ranks with minidp.launch.spawn or torchrun"
        )
    shape = tuple(mesh_shape)
    world = dist.get_world_size()
    if not shape or any(not isinstance(s, int) or s < 1 for s in shape):
        raise ValueError(f"init_device_mesh: expected positive int sizes, got {mesh_shape!r}")
    if math.prod(shape) != world:
        raise ValueError(
            f"init_device_mesh: expected mesh_shape to hold all {world} ranks, got {shape} "
            f"({math.prod(shape)} ranks). Hint: e.g. ({world // 2 or 1}, 2) for "
            "replicate x shard, when the world size is even"
        )
    names = tuple(mesh_dim_names) if mesh_dim_names is not None else None
    if names is not None and (len(names) != len(shape) or len(set(names)) != len(names)):
        raise ValueError(
            f"init_device_mesh: expected {len(shape)} distinct mesh_dim_names for mesh_shape "
            f"{shape}, got {names}"
        )
    del device_type  # one gloo world: the mesh's groups use the default group's backend
    mesh = torch.arange(world).reshape(shape)
    me = dist.get_rank()
    groups = []
    for dim in range(len(shape)):
        if len(shape) == 1:
            groups.append(dist.group.WORLD)
            break
        lines = mesh.movedim(dim, -1).reshape(-1, shape[dim])  # every group along dim
        mine = None
        for ranks in lines.tolist():  # every rank creates every group, in the same order
            group = dist.new_group(ranks)
            if me in ranks:
                mine = group
        groups.append(mine)
    return DeviceMesh(mesh, names, groups)
