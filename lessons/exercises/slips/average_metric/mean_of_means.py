"""mean of means

You averaged the per-rank means; with shards of different sizes that weights each sample by
1/(its shard's size). All-reduce the sum and the count (tensor([sum, count])), then divide
once.
"""

import torch

from minidp.comm import all_reduce


def average_metric(values: torch.Tensor, group) -> float:
    local = values.double().mean().reshape(1)  # nan for an empty shard
    all_reduce(local, group=group)
    return (local / group.size()).item()
