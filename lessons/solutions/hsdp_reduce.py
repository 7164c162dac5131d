"""Reference solution: HSDP's gradient reduction (lesson 37).

Check: ``python -m minidp exercise check hsdp_reduce --path lessons/solutions/hsdp_reduce.py``
"""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad: torch.Tensor, shard_group, replicate_group) -> torch.Tensor:
    s, me = shard_group.size(), shard_group.rank()
    world = s * replicate_group.size()
    rows = grad.shape[0]
    k = -(-rows // s)  # ceil: every piece the same number of rows
    padded = torch.cat([grad, grad.new_zeros((k * s - rows, *grad.shape[1:]))])  # (k*S, ...)
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, list(padded.split(k)), group=shard_group)  # summed over my row
    all_reduce(piece, group=replicate_group)  # ... and over my column: every rank
    piece = piece / world
    mine = max(min(rows - me * k, k), 0)  # torch.chunk's rows for this rank
    return piece[:mine].clone()
