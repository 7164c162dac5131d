"""Wrong on purpose (S >= 4): the rows this rank keeps are counted as min(rows, (me+1)k) - me*k,
negative where torch.chunk has run out of rows — and a negative slice end cuts from the end."""

import torch

from minidp.comm import all_reduce, reduce_scatter


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me, r = shard_group.size(), shard_group.rank(), replicate_group.size()
    rows = grad.size(0)
    k = (rows + s - 1) // s
    pad = torch.zeros((k * s - rows,) + tuple(grad.shape[1:]), dtype=grad.dtype)
    pieces = list(torch.cat([grad, pad]).split(k))
    mine = torch.empty_like(pieces[0])
    reduce_scatter(mine, pieces, group=shard_group)
    all_reduce(mine, group=replicate_group)
    mine = mine / (s * r)
    keep = min(rows, (me + 1) * k) - me * k
    return mine[:keep].clone()
