"""HSDP on one page: FSDP within each node, plain data parallelism across the nodes.

The ranks form a 2-D mesh: ``R`` rows of ``S`` ranks (``init_device_mesh(..., (R, S),
mesh_dim_names=("replicate", "shard"))``), a row usually being one machine. Each row is a
complete FSDP world — its ``S`` ranks hold one piece each of every parameter — and every
row holds the same pieces, so rank ``(i, s)`` and rank ``(j, s)`` are replicas. Forward
and backward gather within the row, on the fast links inside the machine. After
backward the gradient is reduce-scattered within the row (the FSDP page), and then each
rank's *piece* — ``1/S`` of the gradient — is averaged down its column, across the
machines: one all-reduce, the only traffic that leaves the node.

    mesh = minidp.init_device_mesh("cpu", (R, S), mesh_dim_names=("replicate", "shard"))
    model = HSDP(model, mesh)
    ... as with FSDP: forward, backward, model.reduce_grads(), opt.step()

Test: ``pytest tests/test_textbook_shard.py -k hsdp`` (against FSDP2's HSDP at 2 x 2).
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.textbook.collectives import ring_all_reduce
from minidp.textbook.fsdp import FSDP


class HSDP(FSDP):
    """FSDP over the mesh's ``"shard"`` dimension, replicated over ``"replicate"``."""

    def __init__(self, module: nn.Module, mesh) -> None:
        super().__init__(module, mesh.get_group("shard"))  # the row: pieces live here
        self.replicas = mesh.get_group("replicate")  # the column: my piece's replicas

    def _reduce(self, grad: torch.Tensor) -> torch.Tensor:
        mine = super()._reduce(grad)  # averaged within the row: my rows, 1/S of the gradient
        return ring_all_reduce(mine, "avg", self.replicas)  # ... and across the rows


# What the engine adds (``fully_shard(module, mesh=mesh)``): everything the FSDP page
# lists, and the two collectives overlapped with backward, unit by unit.
