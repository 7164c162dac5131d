"""Wrong on purpose: sums the gradients over the ranks but never divides."""

from minidp.comm import all_reduce


def average_gradients(model, group):
    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad, "sum", group)
