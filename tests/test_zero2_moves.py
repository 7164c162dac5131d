"""ZeRO-2's freed gradients, no_sync and freezing: the misuses each get a clear error.

The moves themselves are checked against torch in the training-loop matrix
(``test_matrix_ddp_zero.py``: ``zero2-clip``, ``zero2-no_sync``, ``zero2-frozen_after`` and
the combined cases, ``torch.equal`` to FSDP2 ``reshard_after_forward=False``), and what a
freed ``.grad`` (a DTensor, as FSDP2's) allows in ``test_zero2_grads.py`` and
``test_fsdp_dtensor.py``. Here: the loops that ``step()`` refuses rather than train wrongly.

Run: ``pytest tests/test_zero2_moves.py``
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from minidp.launch import WorkerError, run_threads
from minidp.zero import Zero2Optimizer


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))


def _backward(model: nn.Module, rank: int) -> None:
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(rank))
    model(x).pow(2).sum().backward()


def _rank_error(fn, pattern: str) -> None:
    with pytest.raises(WorkerError) as info:
        run_threads(fn, 2, timeout=30)
    with pytest.raises(WorkerError, match=pattern):
        raise info.value


def _step_after_no_sync_only(rank, world):
    model = _model()
    opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    with opt.no_sync():
        _backward(model, rank)
    opt.step()


def test_step_after_only_no_sync_backwards_is_refused():
    _rank_error(
        _step_after_no_sync_only,
        r"expected the last backward before step\(\) to run outside no_sync\(\), got 4 "
        r"parameters whose gradients were only accumulated locally.*Hint: run the last",
    )


def _unfrozen_after(rank, world):
    model = _model()
    model[2].requires_grad_(False)
    opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    model[2].requires_grad_(True)
    _backward(model, rank)
    opt.step()


def test_unfreezing_a_parameter_frozen_at_construction_is_refused():
    _rank_error(
        _unfrozen_after,
        r"expected parameters frozen at construction to stay frozen, got a gradient on the "
        r"parameter of shape \(2, 5\).*Hint: build the Zero2Optimizer while it is trainable",
    )


def _no_sync_then_sync(rank, world):
    """Local accumulation: the kept full gradient is added to, then reduce-scattered once."""
    model = _model()
    opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    with opt.no_sync():
        _backward(model, rank)
    kept = model[0].weight.grad is None  # (a thread world frees to None: no torch mesh)
    opt.set_requires_gradient_sync(False)
    _backward(model, rank + 10)
    opt.set_requires_gradient_sync(True)
    _backward(model, rank + 20)
    opt.step()
    opt.zero_grad()
    return {"kept_full": not kept, "freed": model[0].weight.grad is None}


def test_no_sync_keeps_full_local_gradients_until_a_synced_backward():
    for r in run_threads(_no_sync_then_sync, 2):
        assert r == {"kept_full": True, "freed": True}
