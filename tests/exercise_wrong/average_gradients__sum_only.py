"""Wrong on purpose: the gradients are summed over the ranks, never divided."""

from minidp.comm import all_reduce


def average_gradients(model, group):
    for param in model.parameters():
        if param.grad is not None:
            all_reduce(param.grad, "sum", group)
