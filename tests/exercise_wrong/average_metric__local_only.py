"""Wrong on purpose: returns this rank's own mean; nothing is all-reduced."""

import torch


def average_metric(values: torch.Tensor, group) -> float:
    return values.double().mean().item()
