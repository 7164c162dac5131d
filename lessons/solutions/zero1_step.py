"""Reference solution: ZeRO-1's step (lesson 19)."""

import torch
from torch import nn

from minidp.comm import all_reduce, broadcast


def zero1_step(model: nn.Module, optimizer, owners: list[int], group) -> None:
    """Average every gradient, step my share, broadcast each parameter from its owner."""
    params = list(model.parameters())
    with torch.no_grad():
        for p in params:
            p.grad.div_(group.size())  # DDP's average: divide, then sum
            all_reduce(p.grad, "sum", group)
        optimizer.step()  # holds only the parameters this rank owns
        for p, owner in zip(params, owners):
            broadcast(p, group=group, group_src=owner)
