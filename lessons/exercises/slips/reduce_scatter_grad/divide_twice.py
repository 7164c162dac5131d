"""divided twice

Every piece is the reference divided by world_size once more: divide by group.size() ONCE —
before the reduce-scatter or after it, not both.
"""

import torch

from minidp.comm import reduce_scatter


def reduce_scatter_grad(param: torch.Tensor, group) -> None:
    world = group.size()
    flat = param.grad.reshape(-1) / world  # divided here...
    k = -(-flat.numel() // world)
    padded = torch.cat([flat, flat.new_zeros(k * world - flat.numel())])
    shard = torch.empty(k, dtype=flat.dtype)
    reduce_scatter(shard, list(padded.split(k)), group=group)
    param.grad_shard = shard / world  # ...and again here
    param.grad = None
