"""all-reduced the full gradient

The values are right, but this rank sent far more than HSDP does: reduce-scatter in the
shard group FIRST (each rank keeps 1/S of the gradient), then all-reduce only that piece
across the replicate group — not the whole gradient in either.
"""

from minidp.comm import all_reduce


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    full = all_reduce(grad.clone(), group=shard_group)  # every row of the gradient
    chunks = full.chunk(s)
    piece = chunks[me].clone() if me < len(chunks) else full[:0].clone()
    all_reduce(piece, group=replicate_group)
    return piece / (s * replicate_group.size())
