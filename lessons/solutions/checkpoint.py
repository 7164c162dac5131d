"""Reference solution: save on rank 0, barrier, load with map_location on every rank
(lesson 15 shows each step broken, then fixed).

Check: ``python -m minidp exercise check checkpoint --path lessons/solutions/checkpoint.py``
"""

import torch
from torch import nn

from minidp.comm import barrier


def checkpoint(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    fresh_model: nn.Module,
    fresh_optimizer: torch.optim.Optimizer,
    path: str,
    group,
) -> None:
    if group.rank() == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    barrier(group)  # nobody loads before the file is complete
    state = torch.load(path, map_location="cpu", weights_only=True)
    fresh_model.load_state_dict(state["model"])
    fresh_optimizer.load_state_dict(state["optimizer"])
