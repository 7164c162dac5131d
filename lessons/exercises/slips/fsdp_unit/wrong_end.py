"""rows cut from the wrong end

Your gradient shard holds the right number of rows, but from the end of the padded piece: the
padding is at the end of the last rank's piece, so keep the FIRST rows (piece[:rows]), as
many as your shard has — the rest is padding.
"""

import math

import torch

from minidp.comm import all_gather, reduce_scatter


def fsdp_unit(module, shards, x, grad_out, group):
    world = group.size()
    shapes = {name: p.shape for name, p in module.named_parameters()}
    full = {}
    for name, shard in shards.items():
        rows = math.ceil(shapes[name][0] / world)
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
        grads[name] = mine[rows - shard.shape[0] :]  # the slip: the last rows, not the first
    return out, grads
