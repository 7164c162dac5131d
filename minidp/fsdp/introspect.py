"""FSDP2's introspection by its own names, over minidp's units: ``fully_shard.state(m)``.

Code written for FSDP2 reads a module's FSDP state: is it the root (``_is_root``, ``None``
before the first forward), the root's states in module order (``_state_ctx.all_states``),
the lazy init (``_lazy_init()``: the first forward's root-finding, run now), the parameter
group (``_fsdp_param_group``: ``_module_fqn``, ``fsdp_params[i]._param_fqn``,
``is_unsharded``, ``_orig_dtype``, ``_reduce_dtype``) and a group's modules still to run in
this pass (``_modules_to_run_forward``). minidp's ``FSDPUnit`` holds the same facts; this
view answers under FSDP2's names. FSDP2's CUDA machinery (streams, events, its collective
context) has no minidp counterpart and is not here.

Test: ``pytest tests/test_fsdp_moves.py``
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from minidp.fsdp.root import lazy_init
from minidp.fsdp.unit import unit_of


def state_of(module: nn.Module) -> State | None:
    """``fully_shard.state(module)``: the FSDP state of a wrapped module, else None."""
    unit = unit_of(module)
    if unit is None:
        return None
    if unit.state is None:
        unit.state = State(unit)
    return unit.state


@dataclass
class StateContext:
    all_states: list = field(default_factory=list)


@dataclass
class Param:
    _param_fqn: str
    sharded_param: nn.Parameter


class State:
    """One unit, seen as FSDP2's ``FSDPState``."""

    def __init__(self, unit) -> None:
        self.unit = unit

    @property
    def _is_root(self) -> bool | None:
        return self.unit.is_root

    def _lazy_init(self) -> None:
        if self.unit.root is None:
            lazy_init(self.unit)

    @property
    def _state_ctx(self) -> StateContext:
        root = self.unit.root
        return StateContext([state_of(u.module) for u in root.units] if root else [])

    @property
    def _modules_to_run_forward(self) -> set[nn.Module]:
        return {m for m in self.unit.modules if id(m) in self.unit.to_run}

    @property
    def _fsdp_param_group(self) -> ParamGroup | None:
        return ParamGroup(self.unit) if self.unit.shapes else None

    @property
    def _fsdp_param_groups(self) -> list[ParamGroup]:
        group = self._fsdp_param_group
        return [group] if group is not None else []


class ParamGroup:
    """A unit's parameters, seen as FSDP2's ``FSDPParamGroup``."""

    def __init__(self, unit) -> None:
        self.unit = unit
        root = unit.root.unit.module if unit.root is not None else unit.module
        self._names = {id(m): n for n, m in root.named_modules()}
        self._fqns = {id(p): n for n, p in root.named_parameters()}

    @property
    def _module_fqn(self) -> str | None:
        found = [self._names[id(m)] for m in self.unit.modules if id(m) in self._names]
        return ", ".join(found) if found else None

    @property
    def fsdp_params(self) -> list[Param]:
        u = self.unit
        return [Param(self._fqns.get(id(p), n), p) for n, p in zip(u.names, u.sharded)]

    @property
    def is_unsharded(self) -> bool:
        return self.unit.is_unsharded

    @property
    def _orig_dtype(self):
        return self.unit.dtype if any(self.unit.requires_grad) else None

    @property
    def _reduce_dtype(self):
        mp = self.unit.mp
        if not any(self.unit.requires_grad):
            return None
        return None if mp.reduce_dtype == mp.param_dtype else mp.reduce_dtype
