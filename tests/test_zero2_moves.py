"""ZeRO-2's freed gradients, no_sync and freezing: the misuses each get a clear error.

The moves themselves are checked against torch in the training-loop matrix
(``test_matrix_ddp_zero.py``: ``zero2-clip``, ``zero2-no_sync``, ``zero2-frozen_after`` and
the combined cases, ``torch.equal`` to FSDP2 ``reshard_after_forward=False``). Here: what a
freed ``.grad`` (``minidp/zero/zero2_grads.py``) allows and refuses, and the loops that
``step()`` refuses rather than train wrongly.

Run: ``pytest tests/test_zero2_moves.py``
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from minidp.launch import WorkerError, run_threads
from minidp.zero import Zero2Optimizer
from minidp.zero.zero2_grads import FreedGrad


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))


def _backward(model: nn.Module, rank: int) -> None:
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(rank))
    model(x).pow(2).sum().backward()


def _freed(rank, world):
    model = _model()
    opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    _backward(model, rank)
    g = model[0].weight.grad
    rows = [s.clone() for s in opt.gradient_shards()]
    torch.nn.utils.clip_grad_value_(model.parameters(), 1e-3)  # clamp_ on this rank's rows
    clamped = [s.clone() for s in opt.gradient_shards()]
    try:
        g.sum()
    except RuntimeError as err:
        refused = str(err)
    return {
        "type": type(g).__name__,
        "shape": tuple(g.shape),
        "repr": repr(g),
        "clamped": all(torch.equal(c, r.clamp(-1e-3, 1e-3)) for c, r in zip(clamped, rows)),
        "refused": refused,
    }


def test_a_freed_grad_has_the_shape_allows_scaling_and_refuses_reads():
    for rank, r in enumerate(run_threads(_freed, 2)):
        assert r["type"] == "FreedGrad" and r["shape"] == (5, 3)
        assert f"rank {rank} holds rows of shape" in r["repr"], r["repr"]
        assert r["clamped"], "clip_grad_value_ must clamp this rank's rows in place"
        assert "expected only norms, in-place scaling" in r["refused"]
        assert "got sum" in r["refused"] and "opt.gradient_shards()" in r["refused"]


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
    kept = isinstance(model[0].weight.grad, FreedGrad)
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
