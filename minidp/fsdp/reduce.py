"""FSDP's gradient reduce-scatter: ``minidp.comm.reduce_scatter_tensor`` (gloo's bits).

Test: ``pytest tests/test_fsdp.py -k gloo``
"""

from __future__ import annotations

import torch

from minidp.comm import reduce_scatter_tensor


def gloo_reduce_scatter(flat: torch.Tensor, op: str, group) -> torch.Tensor:
    """This rank's ``(T,)`` piece of the reduction of ``flat`` ``(world * T,)``; ``flat``
    (contiguous, rank-local) is lent as the work buffer."""
    mine = flat.new_empty(flat.numel() // group.size())  # (T,) rank-local
    return reduce_scatter_tensor(mine, flat, op, group, input_is_scratch=True)
