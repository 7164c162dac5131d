"""Reference solution: one all-reduce per gradient, scaled by 1/W first, like torch.
(``minidp.ddp.allreduce_gradients`` packs them into one flat buffer instead; lesson 10.)

Check: ``python -m minidp exercise check average_gradients --path lessons/solutions/average_gradients.py``
"""

from torch import nn

from minidp.comm import all_reduce


def average_gradients(model: nn.Module, group) -> None:
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(1.0 / group.size())  # scale first, then sum: torch's order
            all_reduce(p.grad, "sum", group)
