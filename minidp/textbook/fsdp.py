"""FSDP (ZeRO-3) on one page: every parameter cut on dim 0, one piece per rank.

Each rank keeps only its rows of every parameter: a parameter of ``d0`` rows is padded to
``c * W`` rows (``c = ceil(d0 / W)``) and rank ``r`` keeps rows ``[r*c, (r+1)*c)`` — the
layout of FSDP2's ``fully_shard``, so a piece here is FSDP2's ``p.to_local()`` (zero rows
where the padding is). Before the forward every rank all-gathers the pieces into whole
parameters; after backward the gradients are reduce-scattered, so each rank receives the
average of its own rows only, the one part its optimizer steps; then the whole
parameters are freed again.

    model = FSDP(model)                              # every rank: the same initial weights
    opt = torch.optim.AdamW(model.parameters())      # steps this rank's pieces
    loss_fn(model(x), y).backward()
    model.reduce_grads()                             # my rows of the averaged gradient
    opt.step()

The collectives are the book's (``collectives.py``), the padding rule the ZeRO page's
(``zero.pieces``).

Test: ``pytest tests/test_textbook_shard.py`` (against FSDP2, bit for bit at 2 ranks).
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.comm import group as groups
from minidp.textbook.collectives import all_gather, reduce_scatter
from minidp.textbook.zero import pieces


class FSDP(nn.Module):
    """``module`` whose parameters live as dim-0 pieces, one per rank, between steps."""

    def __init__(self, module: nn.Module, group=None) -> None:
        super().__init__()
        self.module = module
        self.group = groups.resolve(group)
        world, rank = self.group.size(), self.group.rank()
        self.params = list(dict.fromkeys(module.parameters()))  # tied ones once
        self.rows = [p.shape[0] for p in self.params]
        self.shards = nn.ParameterList(  # what this rank owns and steps
            nn.Parameter(pieces(p.detach(), world)[rank].clone()) for p in self.params
        )
        self._free()

    def _free(self) -> None:
        for p in self.params:
            p.data = p.data.new_empty(0)  # the whole parameter is gone; its piece remains
            p.grad = None

    def forward(self, *args, **kwargs):
        world = self.group.size()
        for p, shard, rows in zip(self.params, self.shards, self.rows):
            full = [torch.empty_like(shard) for _ in range(world)]
            all_gather(full, shard.detach(), self.group)
            p.data = torch.cat(full)[:rows]  # whole again (padding cut off) for the module
        return self.module(*args, **kwargs)

    def _reduce(self, grad: torch.Tensor) -> torch.Tensor:
        """My rows of the gradient averaged over the ranks (HSDP adds a step here)."""
        parts = pieces(grad, self.group.size())
        mine = torch.empty_like(parts[0])
        return reduce_scatter(mine, parts, "avg", self.group)

    @torch.no_grad()
    def reduce_grads(self) -> None:
        """After backward: average the gradients, keep my rows, free the whole parameters."""
        for p, shard in zip(self.params, self.shards):
            if p.grad is not None:
                mine = self._reduce(p.grad)
                shard.grad = mine if shard.grad is None else shard.grad + mine  # accumulate
        self._free()


# What the engine adds (``minidp.fsdp.fully_shard``): *units* — each block is gathered just
# before its forward and freed right after, gathered again for its backward, so only a
# block or two are ever whole at once (here the whole model is, from forward to
# ``reduce_grads``); one all-gather per unit for all its pieces; prefetching the next unit
# while this one computes; the reduce-scatter launched during backward as each unit's
# gradients are ready; mixed precision; DTensor parameters that torch's own APIs
# (``clip_grad_norm_``, DCP checkpoints) understand; and the engine's collectives, gloo's
# order bit for bit at any world size.
