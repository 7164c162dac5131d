"""returned the full gradients

Each rank returned every row of every gradient: FSDP keeps only this rank's rows —
reduce-scatter, and return your own chunk (the shape of your shard).
"""

import math

import torch
from torch import nn

from minidp.comm import all_gather, all_reduce


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
    for name in shards:  # averaged, but every rank keeps every row
        grad = full[name].grad.clone()
        all_reduce(grad, "avg", group)
        grads[name] = grad
    return out, grads
