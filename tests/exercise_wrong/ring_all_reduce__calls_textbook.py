"""Skips the exercise: calls minidp's textbook ring, which the check makes unavailable."""

import torch

from minidp.textbook import collectives


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    return collectives.ring_all_reduce(tensor, "sum", group)
