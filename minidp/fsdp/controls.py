"""FSDP2's methods on a wrapped module: when to communicate, decided by the training loop.

``fully_shard`` attaches these to the module it wraps (FSDP2 swaps the module's class to
add them; minidp binds them to the instance), with FSDP2's names and meaning:

* ``set_requires_gradient_sync(False)`` — backwards keep unsharded gradients and
  reduce-scatter nothing (gradient accumulation's micro-batches; DDP's ``no_sync``).
* ``set_reshard_after_backward(False)`` — after backward the units stay gathered, so the
  next forward gathers nothing: with ``set_requires_gradient_sync(False)`` a micro-batch
  then costs no communication at all, for the memory of the gathered model. Set it back
  to ``True`` for the last micro-batch, before the optimizer changes the shards.
* ``set_modules_to_forward_prefetch([...])`` / ``set_modules_to_backward_prefetch([...])``
  — which units' all-gathers to start when this unit's forward (backward) starts, in place
  of the root's implicit choice (the next unit of the last step; the unit before). Two
  targets gather two units ahead: more overlap, more memory.
* ``unshard(async_op=False)`` — gather this unit now (``async_op=True``: start it and
  return a handle whose ``wait()`` installs it); ``reshard()`` — free it now. Before the
  model's first forward only the outermost module may ``unshard()``: the unit it is called
  on becomes the root, which must know every unit under it.

``recurse`` (where FSDP2 has it) applies the setting to every unit under the module.

Test: ``pytest tests/test_fsdp_controls.py``
"""

from __future__ import annotations

import types

from torch import nn

from minidp.fsdp.root import ensure_root
from minidp.fsdp.unit import FSDPUnit, unit_of


def attach(module: nn.Module) -> None:
    """Bind FSDP2's methods to the wrapped ``module``."""
    for fn in (
        set_requires_gradient_sync,
        set_reshard_after_backward,
        set_modules_to_forward_prefetch,
        set_modules_to_backward_prefetch,
        unshard,
        reshard,
    ):
        setattr(module, fn.__name__, types.MethodType(fn, module))


def _units(module: nn.Module, recurse: bool) -> list[FSDPUnit]:
    return [u for m in (module.modules() if recurse else [module]) if (u := unit_of(m))]


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r}")


def set_requires_gradient_sync(
    module: nn.Module, requires_gradient_sync: bool, *, recurse: bool = True
) -> None:
    """``False``: backwards accumulate unsharded gradients and reduce-scatter nothing (the
    micro-batches of gradient accumulation, like DDP's ``no_sync``); ``True`` again before
    the last micro-batch's backward, which reduce-scatters the sum."""
    _check_bool("set_requires_gradient_sync", requires_gradient_sync)
    for unit in _units(module, recurse):
        unit.reduce_grads = requires_gradient_sync


def set_reshard_after_backward(
    module: nn.Module, reshard_after_backward: bool, *, recurse: bool = True
) -> None:
    """``False``: the units stay gathered after backward; the next forward gathers nothing."""
    _check_bool("set_reshard_after_backward", reshard_after_backward)
    for unit in _units(module, recurse):
        unit.reshard_after_backward = reshard_after_backward


def _targets(who: str, modules) -> list[FSDPUnit]:
    if isinstance(modules, nn.Module) or not isinstance(modules, (list, tuple)):
        raise TypeError(f"{who}: expected a list of modules, got {type(modules).__name__}")
    targets = []
    for m in modules:
        unit = unit_of(m) if isinstance(m, nn.Module) else None
        if unit is None:
            raise ValueError(
                f"{who}: expected modules wrapped with fully_shard, got "
                f"{type(m).__name__}, which is not a unit. Hint: pass the modules you called "
                "fully_shard on (e.g. model.blocks[i + 1])"
            )
        targets.append(unit)
    return targets


def set_modules_to_forward_prefetch(module: nn.Module, modules: list[nn.Module]) -> None:
    """When this unit's forward starts, start the all-gathers of ``modules`` (in order)."""
    unit_of(module).forward_prefetch = _targets("set_modules_to_forward_prefetch", modules)


def set_modules_to_backward_prefetch(module: nn.Module, modules: list[nn.Module]) -> None:
    """When this unit's backward starts, start the all-gathers of ``modules`` (in order)."""
    unit_of(module).backward_prefetch = _targets("set_modules_to_backward_prefetch", modules)


class UnshardHandle:
    """An all-gather started by ``unshard(async_op=True)``; ``wait()`` installs the result."""

    def __init__(self, unit: FSDPUnit) -> None:
        self.unit = unit

    def wait(self) -> None:
        self.unit.root.unshard(self.unit)


def unshard(module: nn.Module, async_op: bool = False) -> UnshardHandle | None:
    """Gather this unit's full parameters now (``async_op``: start it, return a handle)."""
    unit = unit_of(module)
    ensure_root(module)  # before the first forward: this module becomes the root
    if async_op:
        unit.root.prefetch(unit)
        return UnshardHandle(unit)
    unit.root.unshard(unit)
    return None


def reshard(module: nn.Module) -> None:
    """Free this unit's full parameters now (they are gathered again when needed)."""
    unit = unit_of(module)
    if unit.is_unsharded:
        unit.free()
