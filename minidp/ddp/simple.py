"""DDP without overlap: average every gradient with ONE all-reduce after backward.

Call it between ``loss.backward()`` and ``optimizer.step()``. The baseline: communication
starts only after backward, so a step costs ``backward + all-reduce``, not about
``max(backward, all-reduce)`` (``python -m minidp bench ddp``).

Test: ``pytest tests/test_ddp.py -k allreduce_gradients``
"""

from __future__ import annotations

import torch

from minidp.comm import all_reduce
from minidp.comm import group as groups


def allreduce_gradients(module: torch.nn.Module, group=None, algorithm: str = "auto") -> None:
    """Replace each ``.grad`` of ``module`` by its average over the ranks (one all-reduce);
    a missing ``.grad`` counts as zeros, and gets one. Every rank passes the same model."""
    g = groups.resolve(group)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for p in module.parameters():
        if p.requires_grad:
            by_dtype.setdefault(p.dtype, []).append(p)
    with torch.no_grad():
        for params in by_dtype.values():  # one flat all-reduce per dtype (usually just one)
            flat = torch.cat(  # (total numel,) rank-local, scaled by 1/world_size like DDP
                [
                    (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                    * (1.0 / g.size())
                    for p in params
                ]
            )
            all_reduce(flat, "sum", g, algorithm)
            offset = 0
            for p in params:
                piece = flat[offset : offset + p.numel()].view(p.shape)
                if p.grad is None:
                    p.grad = piece.clone()
                else:
                    p.grad.copy_(piece)
                offset += p.numel()
