"""ZeRO-2's gradient hooks, and who owns them: one ``Zero2Optimizer`` per parameter.

* :func:`attach` — a post-accumulate-grad hook per parameter that holds the optimizer
  *weakly* (else parameter -> hook -> optimizer -> parameter keeps a dropped optimizer
  alive): collecting it, or ``remove_hooks()``, removes its hooks and its claim. A
  pre-hook clears the DTensor ``.grad`` a freed gradient left before the next accumulates.
* :func:`check_unclaimed` — a second optimizer on the same parameters is refused, naming
  the first (the second would find ``.grad`` already freed).

Test: ``pytest tests/test_zero2_train.py -k second_optimizer``
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from minidp.fsdp.dtensor import DTensor

# parameter -> weakref(its optimizer): weak both ways, or this process-wide table keeps both
_OWNERS = WeakTensorKeyDictionary()


def attach(owner: object, params: list[torch.Tensor], on_grad: Callable) -> list:
    """Hook ``on_grad`` (a method of ``owner``) to every parameter; claim them for ``owner``."""
    method = weakref.WeakMethod(on_grad)

    def hook(p: torch.Tensor) -> None:
        live = method()
        if live is not None:
            live(p)

    handles = [p.register_post_accumulate_grad_hook(hook) for p in params]
    handles += [p.register_hook(_clearing(weakref.ref(p))) for p in params]
    weakref.finalize(owner, _remove_all, list(handles))
    for p in params:
        _OWNERS[p] = weakref.ref(owner)
    return handles


def _clearing(param: weakref.ref) -> Callable:
    def pre_hook(grad: torch.Tensor) -> None:  # the parameter weakly: no cycle through it
        p = param()
        if p is not None:
            clear_stand_in(p)

    return pre_hook


def detach(owner: object, params: list[torch.Tensor], handles: list) -> None:
    """Remove ``owner``'s hooks and give up its claim, so another optimizer may take over."""
    _remove_all(handles)
    for p in params:
        clear_stand_in(p)  # nothing is left to clear it before another optimizer's backward
        if (ref := _OWNERS.get(p)) is not None and ref() is owner:
            del _OWNERS[p]


def clear_stand_in(p: torch.Tensor) -> None:
    """Before autograd accumulates a new gradient: a freed one is not a gradient to add to."""
    if isinstance(p.grad, DTensor):
        p.grad = None


def _remove_all(handles: list) -> None:
    for h in handles:
        h.remove()


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
