"""``FSDPModule``: FSDP2's methods on a wrapped module, so the loop decides when to communicate.

``fully_shard`` makes the module's class ``FSDP<Class>``, a subclass of :class:`FSDPModule`
and of its own class, as FSDP2 does. ``recurse`` applies a setting to every unit below.

Test: ``pytest tests/test_fsdp_controls.py tests/test_fsdp_dtensor.py``
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from minidp import trace
from minidp.fsdp import introspect
from minidp.fsdp.unit import FSDPUnit, unit_of


def _units(module: nn.Module, recurse: bool) -> list[FSDPUnit]:
    units = []
    for m in module.modules() if recurse else [module]:
        if (u := unit_of(m)) is not None and u not in units:
            units.append(u)
    return units


def _check_bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected True or False, got {value!r}")


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


class UnshardHandle:
    """An all-gather started by ``unshard(async_op=True)``; ``wait()`` installs the result."""

    def __init__(self, unit: FSDPUnit) -> None:
        self.unit = unit

    def wait(self) -> None:
        if self.unit.root is not None:  # before the first forward it was gathered at once
            self.unit.root.unshard(self.unit)


class FSDPModule:
    """What ``fully_shard`` adds to a module (its class becomes ``FSDP<Class>``)."""

    def __new__(cls, *args, **kwargs):
        # ``nn.Sequential``'s slicing builds ``type(self)(...)``: a plain module, as FSDP2's
        orig = cls.__mro__[2]  # FSDP<Class>, FSDPModule, <Class>
        self = orig.__new__(orig)
        self.__init__(*args, **kwargs)
        return self

    def set_requires_gradient_sync(self, requires_gradient_sync: bool, *, recurse=True) -> None:
        """``False``: backwards keep unsharded gradients, reduce nothing (DDP's ``no_sync``)."""
        _check_bool("set_requires_gradient_sync", requires_gradient_sync)
        for unit in _units(self, recurse):
            unit.reduce_grads = unit.all_reduce_grads = requires_gradient_sync

    def set_requires_all_reduce(self, requires_all_reduce: bool, *, recurse=True) -> None:
        """HSDP, ``False``: reduce-scatter each backward, all-reduce across the replicas only
        once it is ``True`` again (the rows add up meanwhile)."""
        _check_bool("set_requires_all_reduce", requires_all_reduce)
        for unit in _units(self, recurse):
            unit.all_reduce_grads = requires_all_reduce

    def set_reshard_after_forward(self, reshard_after_forward: bool, recurse=True) -> None:
        """Change ``reshard_after_forward`` now (``False`` for evals, the root ``True``...)."""
        if not isinstance(reshard_after_forward, bool):
            raise ValueError(
                f"reshard_after_forward should be a bool, got {type(reshard_after_forward)}"
            )
        for unit in _units(self, recurse):
            unit.reshard_after_forward, unit.auto_reshard = reshard_after_forward, False
            unit.post_group = None

    def set_unshard_in_backward(self, unshard_in_backward: bool) -> None:
        """``False``: backward needs none of this unit's parameters (an embedding's own
        gradient does not read its weight), so they are not gathered again for it."""
        _check_bool("set_unshard_in_backward", unshard_in_backward)
        unit_of(self).unshard_in_backward = unshard_in_backward

    def set_is_last_backward(self, is_last_backward: bool) -> None:
        """FSDP2's flag for micro-batching: on the last backward it waits for the gradient
        reduction. minidp waits for every reduce-scatter before each backward returns
        already (its collectives run on the host), so the gradients are FSDP2's either way."""
        _check_bool("set_is_last_backward", is_last_backward)

    def set_all_reduce_hook(self, hook, *, stream=None) -> None:
        """``hook(rows)``, on this rank's reduced gradient rows (after HSDP's all-reduce,
        before FSDP2's last divide): e.g. an all-reduce across replicas of your own."""
        unit = unit_of(self)
        if stream is not None and unit.replicate_group is not None:
            raise ValueError("stream cannot be set when using native HSDP")
        unit.all_reduce_hook = hook if stream is None else _on_stream(hook, stream)

    def set_post_optim_event(self, event) -> None:
        """The next forward waits for ``event`` (recorded after the optimizer step) before
        its all-gathers, instead of for everything before it; used once."""
        unit_of(self).post_optim_event = event

    def reset_iter_state(self) -> None:
        """After an exception in forward or backward: reshard every unit and drop the
        iteration's gradients in flight, so the next iteration runs clean. On the root."""
        unit = unit_of(self)
        if unit.is_root is False:
            raise RuntimeError("reset_iter_state must be called on the root FSDP module")
        if unit.root is not None:
            unit.root.reset_iter_state()

    def _get_fsdp_state(self):
        """FSDP2's state of this module, by its names (``introspect.py``)."""
        return introspect.state_of(self)

    def set_reshard_after_backward(self, reshard_after_backward: bool, *, recurse=True) -> None:
        """``False``: units stay gathered after backward, the next forward gathers nothing (with
        no gradient sync: no communication at all); ``True`` before the optimizer step."""
        _check_bool("set_reshard_after_backward", reshard_after_backward)
        for unit in _units(self, recurse):
            unit.reshard_after_backward = reshard_after_backward

    def set_modules_to_forward_prefetch(self, modules: list[nn.Module]) -> None:
        """When this unit's forward starts, start the all-gathers of ``modules`` (in order)."""
        unit_of(self).forward_prefetch = _targets("set_modules_to_forward_prefetch", modules)

    def set_modules_to_backward_prefetch(self, modules: list[nn.Module]) -> None:
        """When this unit's backward starts, start the all-gathers of ``modules`` (in order)."""
        unit_of(self).backward_prefetch = _targets("set_modules_to_backward_prefetch", modules)

    def unshard(self, async_op: bool = False) -> UnshardHandle | None:
        """Gather this unit now, before the first forward too (``async_op``: return a handle)."""
        unit = unit_of(self)
        if unit.root is None:
            if not unit.is_unsharded:
                with trace.span(f"all-gather {unit.label}", lane="comm"):
                    unit.gather()
                unit.install(unit.full)
                unit.is_unsharded = True
        elif async_op:
            unit.root.prefetch(unit)
        else:
            unit.root.unshard(unit)
        return UnshardHandle(unit) if async_op else None

    def reshard(self) -> None:
        """Free this unit's full parameters now (not recursive, as FSDP2's)."""
        unit = unit_of(self)
        if unit.is_unsharded:
            unit.free()
            unit.kept_gathered = False

    def state_dict(self, *args, **kwargs):
        """The sharded (DTensor) parameters: every unit under here is resharded first."""
        _reshard_all(self)
        return super().state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        _reshard_all(self)
        result = super().load_state_dict(*args, **kwargs)
        for unit in _units(self, True):
            unit.adopt()  # assign=True puts new Parameters on the modules
        return result

    def _apply(self, fn, *args, **kwargs):
        """``to_empty()``, ``to()``, ``float()`` ...: on the shards, which are adopted after."""
        _reshard_all(self)
        result = super()._apply(fn, *args, **kwargs)
        unit_of(self).adopt()
        return result


def _on_stream(hook, stream):
    def run(rows):
        with torch.get_device_module(stream.device.type).stream(stream):
            hook(rows)

    return run


def _reshard_all(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, FSDPModule):
            FSDPModule.reshard(m)


@functools.cache
def fsdp_class(cls: type) -> type:
    """``FSDP<cls>``: FSDPModule's methods first, then the module's own (one per class)."""
    return type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
