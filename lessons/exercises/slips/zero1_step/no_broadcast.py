"""no broadcast from the owners

Each rank stepped only its own parameters and kept the others' old values: after the step,
broadcast(p, group=group, group_src=owners[i]) every parameter from the rank that owns it.
"""

import torch

from minidp.comm import all_reduce


def zero1_step(model, optimizer, owners, group):
    with torch.no_grad():
        for p in model.parameters():
            p.grad.div_(group.size())
            all_reduce(p.grad, "sum", group)
        optimizer.step()
