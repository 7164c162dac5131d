"""Skips the exercise: calls minidp's textbook ring, which the check makes unavailable."""

import torch

from minidp.comm import textbook


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    return textbook.ring_all_reduce(tensor, "sum", group)
