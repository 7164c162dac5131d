"""DDP without overlap: average every gradient with ONE all-reduce after backward.

Why this exists: it is the first correct version anyone writes, and the baseline that
shows what the real thing buys. It is correct (every rank ends with the same averaged
gradients) but communication starts only once backward is over, so the step takes
``backward + all-reduce`` instead of roughly ``max(backward, all-reduce)``; and
it moves every gradient through one extra flat copy. ``python -m minidp bench ddp``
puts numbers on it.

Use::

    loss.backward()
    minidp.ddp.allreduce_gradients(model)     # now every .grad is the average
    optimizer.step()

Test: ``pytest tests/test_ddp.py -k allreduce_gradients``
"""

from __future__ import annotations

import torch

from minidp.comm import all_reduce
from minidp.comm import group as groups


def allreduce_gradients(module: torch.nn.Module, group=None, algorithm: str = "auto") -> None:
    """Replace each ``.grad`` of ``module`` by its average over the ranks (one all-reduce).

    Parameters without a gradient count as zeros on this rank (and get one). Every rank
    must call this with the same model.
    """
    g = groups.resolve(group)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for p in module.parameters():
        if p.requires_grad:
            by_dtype.setdefault(p.dtype, []).append(p)
    with torch.no_grad():
        for params in by_dtype.values():  # one flat all-reduce per dtype (usually just one)
            # (total numel,) rank-local; scaled by 1/world_size while copying, like DDP.
            flat = torch.cat(
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
