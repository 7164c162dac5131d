"""local mean only

Every rank returned the mean of its own shard: nothing was all-reduced, so ranks disagree.
Sum the values and the counts over all ranks first.
"""

import torch


def average_metric(values: torch.Tensor, group) -> float:
    return values.double().mean().item()
