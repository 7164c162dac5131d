"""Reference solution: pad, all-gather, forward/backward, pad, reduce-scatter, unpad.

Every parameter is cut on dim 0 and padded at the end to ``world`` equal pieces — FSDP2's
layout (``fully_shard``), and the book's: ``minidp.textbook.fsdp`` cuts every parameter the
same way (its padding rule is ``minidp.textbook.zero.pieces``), and ``minidp.fsdp``'s units
keep one such zero-padded piece per parameter, gathering a unit's parameters together.

Check: ``python -m minidp exercise check fsdp_unit --path lessons/solutions/fsdp_unit.py``
"""

import math

import torch
from torch import nn

from minidp.comm import all_gather, reduce_scatter


def fsdp_unit(
    module: nn.Module,
    shards: dict[str, torch.Tensor],
    x: torch.Tensor,
    grad_out: torch.Tensor,
    group,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    world = group.size()
    shapes = {name: p.shape for name, p in module.named_parameters()}
    full = {}
    for name, shard in shards.items():
        rows = math.ceil(shapes[name][0] / world)  # every rank's padded piece
        padded = shard.new_zeros((rows, *shapes[name][1:]))
        padded[: shard.shape[0]] = shard
        pieces = [torch.empty_like(padded) for _ in range(world)]
        all_gather(pieces, padded, group)
        full[name] = torch.cat(pieces)[: shapes[name][0]].requires_grad_()
    out = torch.func.functional_call(module, full, (x,))
    out.backward(grad_out)
    grads = {}
    for name, shard in shards.items():
        rows = math.ceil(shapes[name][0] / world)
        padded = full[name].grad.new_zeros((rows * world, *shapes[name][1:]))
        padded[: shapes[name][0]] = full[name].grad
        mine = torch.empty_like(padded[:rows])
        reduce_scatter(mine, list(padded.chunk(world)), "avg", group)
        grads[name] = mine[: shard.shape[0]]
    return out, grads
