"""averaged twice

Every value is torch's divided by W once more: divide by W = R * S once — op="avg" in each
step already divides by that group's size.
"""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    rows = grad.shape[0]
    k = -(-rows // s)
    padded = torch.cat([grad, grad.new_zeros((k * s - rows, *grad.shape[1:]))])
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, list(padded.split(k)), op="avg", group=shard_group)
    all_reduce(piece, op="avg", group=replicate_group)
    piece = piece / (s * replicate_group.size())  # op="avg" already divided
    return piece[: max(min(rows - me * k, k), 0)].clone()
