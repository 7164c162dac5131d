"""kept another rank's piece

The numbers are right but they are another rank's piece: rank r keeps piece r of the padded
flat gradient (input_list[r] of the reduce-scatter).
"""

import torch

from minidp.comm import reduce_scatter


def reduce_scatter_grad(param: torch.Tensor, group) -> None:
    """Set ``param.grad_shard`` to this rank's piece of the averaged gradient; free ``.grad``."""
    world = group.size()
    flat = param.grad.reshape(-1)
    k = -(-flat.numel() // world)  # ceil: every piece the same size
    padded = torch.cat([flat, flat.new_zeros(k * world - flat.numel())])  # (world * k,)
    shard = torch.empty(k, dtype=flat.dtype)
    pieces = list(padded.split(k))
    pieces = pieces[1:] + pieces[:1]  # rank r ends with piece r+1
    reduce_scatter(shard, pieces, group=group)
    param.grad_shard = shard / world  # the average, as DDP's gradient would be
    param.grad = None  # the full gradient is gone: ZeRO-2's saving
