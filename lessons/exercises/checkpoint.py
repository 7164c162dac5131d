"""Exercise (lesson 15): save a checkpoint on rank 0, load it on every rank.

Task: every rank holds the same ``model`` and ``optimizer`` (DDP keeps them identical).

1. rank 0 (only) saves ``{"model": model.state_dict(), "optimizer": optimizer.state_dict()}``
   to ``path`` with ``torch.save``;
2. every rank then loads ``path`` with ``torch.load(path, map_location="cpu",
   weights_only=True)`` and restores it into ``fresh_model`` and ``fresh_optimizer``
   (``load_state_dict``) — as a restarted job would.

Tools: ``group.rank()``; ``from minidp.comm import barrier`` — ``barrier(group)`` returns
on a rank only once every rank has called it.

Hints:
* A file at ``path`` may already exist (the previous checkpoint). A rank that loads
  before rank 0 finished saving reads the old one — or half a new one.
* ``map_location="cpu"``: a checkpoint written on ``cuda:0`` remembers that device; on a
  machine without GPUs (or on every rank of a GPU job) load it where *you* want it.
* Without the optimizer state, SGD's momentum restarts from zero and the resumed run
  takes different steps.

Check: ``python -m minidp exercise check checkpoint``
"""

import torch  # noqa: F401  (you will need these)
from torch import nn

from minidp.comm import barrier  # noqa: F401


def checkpoint(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    fresh_model: nn.Module,
    fresh_optimizer: torch.optim.Optimizer,
    path: str,
    group,
) -> None:
    """Rank 0 saves model + optimizer to ``path``; every rank loads it into the fresh ones."""
    raise NotImplementedError("not implemented yet: save on rank 0, wait, load everywhere")
