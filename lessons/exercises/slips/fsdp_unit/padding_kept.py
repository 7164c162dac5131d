"""padding rows left in

A gradient shard has more rows than your parameter shard: you padded every chunk to
ceil(rows / world) rows for the collective — cut the padding off again (keep as many rows as
the shard you were given).
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
    for name in shards:
        rows = math.ceil(shapes[name][0] / world)
        padded = full[name].grad.new_zeros((rows * world, *shapes[name][1:]))
        padded[: shapes[name][0]] = full[name].grad
        mine = torch.empty_like(padded[:rows])
        reduce_scatter(mine, list(padded.chunk(world)), "avg", group)
        grads[name] = mine
    return out, grads
