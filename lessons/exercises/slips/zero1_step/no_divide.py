"""forgot to divide by the world size

The first step moved every parameter world_size times as far as torch's: the all-reduce SUMS
— divide each gradient by group.size() (DDP averages).
"""

import torch

from minidp.comm import all_reduce, broadcast


def zero1_step(model, optimizer, owners, group):
    with torch.no_grad():
        for p in model.parameters():
            all_reduce(p.grad, "sum", group)
        optimizer.step()
        for p, owner in zip(model.parameters(), owners):
            broadcast(p, owner, group)
