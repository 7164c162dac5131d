"""Wrong on purpose: averages the per-rank means (wrong for shards of different sizes)."""

import torch

from minidp.comm import all_reduce


def average_metric(values: torch.Tensor, group) -> float:
    local = values.double().mean().reshape(1)  # nan for an empty shard
    all_reduce(local, group=group)
    return (local / group.size()).item()
