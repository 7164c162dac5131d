"""Wrong on purpose: all-reduces the whole gradient in the shard group, then takes its chunk
(right values, S times the bytes of a reduce-scatter)."""

from minidp.comm import all_reduce


def hsdp_reduce(grad, shard_group, replicate_group):
    s, me = shard_group.size(), shard_group.rank()
    full = all_reduce(grad.clone(), group=shard_group)  # every row of the gradient
    chunks = full.chunk(s)
    piece = chunks[me].clone() if me < len(chunks) else full[:0].clone()
    all_reduce(piece, group=replicate_group)
    return piece / (s * replicate_group.size())
