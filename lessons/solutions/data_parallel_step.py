"""Reference solution: one DataParallel step — minidp's textbook version (read it in
``minidp/dp/textbook.py``; lesson 3 prints it).

Check: ``python -m minidp exercise check data_parallel_step --path lessons/solutions/data_parallel_step.py``
"""

import torch
from torch import nn

from minidp.dp import textbook


def data_parallel_step(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn, devices: list
) -> tuple[torch.Tensor, torch.Tensor]:
    return textbook.data_parallel_step(model, inputs, targets, loss_fn, devices)
