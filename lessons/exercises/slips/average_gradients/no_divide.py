"""forgot to divide by the world size

Every gradient is world_size times torch's: the all-reduce SUMS — divide by group.size()
(torch multiplies each gradient by 1/world_size before the sum).
"""

from minidp.comm import all_reduce


def average_gradients(model, group):
    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad, "sum", group)
