"""rows past the last chunk not clamped

With S >= 4 torch.chunk can run out of rows before the last ranks (5 rows on 4 ranks: 2, 2,
1 and none): rows - rank * k is then negative, and piece[:negative] cuts rows off the END
instead of keeping none. Keep max(min(rows - rank * k, k), 0) rows.
"""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    world = s * replicate_group.size()
    rows = grad.shape[0]
    k = -(-rows // s)
    padded = torch.cat([grad, grad.new_zeros((k * s - rows, *grad.shape[1:]))])
    piece = torch.empty_like(padded[:k])
    reduce_scatter(piece, list(padded.split(k)), group=shard_group)
    all_reduce(piece, group=replicate_group)
    piece = piece / world
    return piece[: min(rows - me * k, k)].clone()  # the slip: no max(..., 0)
