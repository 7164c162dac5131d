"""ZeRO-1's constructor arguments that torch checks and minidp must check the same way.

``ZeroRedundancyOptimizer(params, optimizer_class, process_group=None,
parameters_as_bucket_view=False, overlap_with_ddp=False, **defaults)`` is torch's
signature; everything but ``**defaults`` is the wrapper's own and must never reach the
local optimizer. The checks here run first, before any communication, so a bad call
raises on its own rank at once (every rank makes the same call, so every rank raises).

Test: ``pytest tests/test_zero1_interface.py``
"""

from __future__ import annotations

from typing import Any

import torch


def param_list(who: str, params: Any) -> list:
    """``params`` as a list of tensors or of group dicts; torch's TypeErrors otherwise."""
    if isinstance(params, torch.Tensor):
        # A tensor is iterable: list() would split it into rows, or 0-d views, and each
        # would become a "parameter" that no model uses.
        raise TypeError(
            f"{who}: expected params to be an iterable of tensors or of parameter-group "
            f"dicts, got a single {torch.typename(params)} of shape {tuple(params.shape)}. "
            f"Hint: wrap it in a list, {who}([tensor], ...), or pass model.parameters()"
        )
    try:
        out = list(params)
    except TypeError as exc:
        raise TypeError(
            f"{who}: expected params to be an iterable of tensors or of parameter-group "
            f"dicts, got {type(params).__name__}, which is not iterable. Hint: pass "
            "model.parameters()"
        ) from exc
    if not out:
        raise ValueError(f"{who}: expected at least one parameter, got an empty list")
    dicts = sum(isinstance(p, dict) for p in out)
    if 0 < dicts < len(out):
        raise TypeError(
            f"{who}: expected params to be all tensors or all parameter-group dicts, got "
            f"{dicts} dicts and {len(out) - dicts} other items. Hint: put loose tensors in a "
            'group of their own: [{"params": [...]}, ...]'
        )
    return out


def check_no_overlap(who: str, overlap_with_ddp: bool) -> None:
    """``overlap_with_ddp=True`` is refused: it is another algorithm, not an option."""
    if overlap_with_ddp:
        raise ValueError(
            f"{who}: expected overlap_with_ddp=False, got {overlap_with_ddp!r}: minidp's "
            "ZeRO-1 steps after backward and does not run the optimizer inside DDP's "
            "communication hook (torch's ddp_zero_hook.py, with a functional optimizer). "
            "Hint: leave overlap_with_ddp=False and call opt.step() after backward, or use "
            "minidp.zero.Zero2Optimizer, whose reduce-scatter overlaps backward"
        )
