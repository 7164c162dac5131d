"""tensor_split's rows, not torch.chunk's

Your shard has as-even-as-possible rows (tensor_split: 7 rows on 3 ranks are 3, 2, 2), but
HSDP shards like torch.chunk: ceil(rows / S) rows each and the rest on the last (3, 3, 1) —
the padding to k = ceil(rows / S) gives that.
"""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    world = s * replicate_group.size()
    parts = list(grad.tensor_split(s))
    k = max(p.shape[0] for p in parts)
    pieces = [torch.cat([p, p.new_zeros((k - p.shape[0], *p.shape[1:]))]) for p in parts]
    piece = torch.empty_like(pieces[0])
    reduce_scatter(piece, pieces, group=shard_group)
    all_reduce(piece, group=replicate_group)
    return (piece / world)[: parts[me].shape[0]].clone()
