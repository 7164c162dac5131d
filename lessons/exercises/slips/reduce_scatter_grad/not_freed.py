"""did not free the full gradient

The pieces are right, but param.grad still holds the full gradient: set param.grad = None —
freeing it is ZeRO-2's whole memory saving.
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
    reduce_scatter(shard, list(padded.split(k)), group=group)  # piece r, summed over ranks
    param.grad_shard = shard / world  # the average, as DDP's gradient would be
