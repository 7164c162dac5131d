"""Wrong on purpose: all-reduces a flat copy of the gradients and never copies it back."""

import torch

from minidp.comm import all_reduce


def average_gradients(model, group):
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()]) / group.size()
    all_reduce(flat, "sum", group)  # the average is in `flat`... and stays there
