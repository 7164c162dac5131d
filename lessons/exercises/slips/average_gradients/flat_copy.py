"""gradients unchanged

Every rank kept its own gradients: the all-reduce ran on a copy (torch.cat, .clone(),
.reshape of a non-contiguous tensor) and the result never went back into p.grad — copy it
back (p.grad.copy_(...)) or reduce p.grad itself.
"""

import torch

from minidp.comm import all_reduce


def average_gradients(model, group):
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()]) / group.size()
    all_reduce(flat, "sum", group)  # the average is in `flat`... and stays there
