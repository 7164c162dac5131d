"""Wrong on purpose: sums the gradients over the ranks but never divides."""

import torch

from minidp.comm import all_reduce, broadcast


def zero1_step(model, optimizer, owners, group):
    with torch.no_grad():
        for p in model.parameters():
            all_reduce(p.grad, "sum", group)
        optimizer.step()
        for p, owner in zip(model.parameters(), owners):
            broadcast(p, owner, group)
