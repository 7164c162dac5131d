"""Reference solution: the average of a metric over shards of different sizes.

Check: ``python -m minidp exercise check average_metric --path lessons/solutions/average_metric.py``
"""

import torch

from minidp.comm import all_reduce


def average_metric(values: torch.Tensor, group) -> float:
    totals = torch.tensor([values.double().sum().item(), values.numel()], dtype=torch.float64)
    all_reduce(totals, group=group)  # [sum over every sample, number of samples]
    return (totals[0] / totals[1]).item()
