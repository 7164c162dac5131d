"""ZeRO-3 in its plainest form: one flat shard per rank, gather, compute, reduce-scatter.

What it keeps of FSDP: each rank stores only ``1/world`` of the parameters (one slice of
all of them laid end to end), all-gathers them for the forward and backward, and
reduce-scatters the gradients so each rank gets the averaged gradient of its slice — the
only part its optimizer steps. What it leaves out (``wrap.py``/``root.py`` add it): units,
so the whole model is gathered at once; freeing between forward and backward; prefetch;
dim-0 shards that line up with FSDP2's (here the cut falls anywhere).

    model = TextbookFSDP(model)                         # on every rank, same initial weights
    opt = torch.optim.AdamW(model.parameters())         # steps the shard (the rest is empty)
    loss_fn(model(x), y).backward()
    model.reduce_grads()                                 # reduce-scatter, then free
    opt.step()

Test: ``pytest tests/test_fsdp.py -k textbook`` (equal to ``fully_shard`` at 2 ranks).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from minidp.comm import all_gather, reduce_scatter
from minidp.comm import group as groups


class TextbookFSDP(nn.Module):
    """``module`` with its parameters replaced by one flat shard per rank."""

    def __init__(self, module: nn.Module, group=None) -> None:
        super().__init__()
        self.module = module
        self.group = groups.resolve(group)
        self.params = list(module.parameters())  # tied ones once
        self.shapes = [p.shape for p in self.params]  # kept: the parameters will be emptied
        self.numels = [p.numel() for p in self.params]
        self.numel = sum(self.numels)
        world, rank = self.group.size(), self.group.rank()
        self.n = math.ceil(self.numel / world)  # elements per rank
        flat = torch.zeros(self.n * world)  # (world * n,) the last rank's tail is padding
        flat[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.shard = nn.Parameter(flat[rank * self.n : (rank + 1) * self.n].clone())
        self._free()

    def _free(self) -> None:
        for p in self.params:
            p.data = torch.empty(0)  # the replica is gone; only the shard remains
            p.grad = None

    def forward(self, *args, **kwargs):
        pieces = [torch.empty(self.n) for _ in range(self.group.size())]
        all_gather(pieces, self.shard.detach(), group=self.group)
        full = torch.cat(pieces)[: self.numel]  # (numel,) every parameter, end to end
        for p, chunk, shape in zip(self.params, full.split(self.numels), self.shapes):
            p.data = chunk.view(shape)  # the module computes with the full weights
        return self.module(*args, **kwargs)

    def reduce_grads(self) -> None:
        """After backward: average the gradients, keep this rank's slice, free the rest."""
        world = self.group.size()
        flat = torch.zeros(self.n * world)  # (world * n,)
        flat[: self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
        mine = torch.empty(self.n)  # (n,) rank-local
        reduce_scatter(mine, list(flat.chunk(world)), op="avg", group=self.group)
        self.shard.grad = mine if self.shard.grad is None else self.shard.grad + mine
        self._free()
