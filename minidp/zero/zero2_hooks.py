"""Who owns ZeRO-2's parameters: one ``Zero2Optimizer`` per parameter.

* :func:`attach` — claims the parameters for the optimizer (weakly: collecting it, or
  ``remove_hooks()``, ends the claim); beside its queue's gradient hooks
  (``comm/launch_queue.py``), a pre-hook clears the DTensor ``.grad`` a freed gradient left
  before the next accumulates.
* :func:`check_unclaimed` — a second optimizer on the same parameters is refused, naming
  the first (the second would find ``.grad`` already freed).

Test: ``pytest tests/test_zero2_train.py -k second_optimizer``
"""

from __future__ import annotations

import gc
import weakref
from functools import partial

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from minidp.comm.launch_queue import LaunchQueue
from minidp.fsdp.dtensor import DTensor

# parameter -> weakref(its optimizer): weak both ways, or this process-wide table keeps both
_OWNERS = WeakTensorKeyDictionary()


def attach(owner: object, queue: LaunchQueue, params: list[torch.Tensor]) -> None:
    """Claim ``params`` for ``owner``; before a gradient accumulates, clear a freed one (the
    hooks go with ``queue``; each holds its parameter weakly: no cycle through it)."""
    queue.keep([p.register_hook(partial(_clear_stand_in, weakref.ref(p))) for p in params])
    for p in params:
        _OWNERS[p] = weakref.ref(owner)


def detach(owner: object, queue: LaunchQueue, params: list[torch.Tensor]) -> None:
    """Remove ``owner``'s hooks and give up its claim, so another optimizer may take over."""
    queue.remove()
    for p in params:
        _clear_stand_in(weakref.ref(p))  # nothing left to clear it before another's backward
        if (ref := _OWNERS.get(p)) is not None and ref() is owner:
            del _OWNERS[p]


def _clear_stand_in(param: weakref.ref, grad: torch.Tensor | None = None) -> None:
    """Before autograd accumulates a new gradient: a freed one is not a gradient to add to."""
    p = param()
    if p is not None and isinstance(p.grad, DTensor):
        p.grad = None


def _owner(p: torch.Tensor) -> object | None:
    ref = _OWNERS.get(p)
    return ref() if ref is not None else None


def check_unclaimed(who: str, params: list[torch.Tensor]) -> None:
    """Refuse parameters that another live optimizer hooks."""
    if any(_owner(p) is not None for p in params):
        # a dropped optimizer may still wait for the cycle collector (its state holds
        # cycles): collect first, so `opt = Zero2Optimizer(...)` again always works
        gc.collect()
    for i, p in enumerate(params):
        first = _owner(p)
        if first is not None:
            raise RuntimeError(
                f"{who}: expected parameters no other {who} manages, got trainable parameter "
                f"{i} of shape {tuple(p.shape)} already hooked by {first!r}; both would reduce "
                "and free each gradient, and the second would find .grad gone. Hint: keep one "
                "optimizer per model, or call first.remove_hooks() before building a new one"
            )
