"""A unit's forward hooks: gather before, free after, FSDP2's casts, the hooks backward needs.

A unit's pass starts at the first of its modules to run and ends once all have run
(``fully_shard([a, b])``: FSDP2's modules-to-run set). A module the model's forward skipped
is finished by the root's post-forward — a chunked loss runs ``model(x, skip_head=True)``
and then ``model.head(chunk)`` per chunk, each call a pass of its own. Each module casts
its floating-point inputs to ``param_dtype`` (``cast_forward_inputs``) and its outputs to
``output_dtype``; the root moves the inputs to its device first (a GPU; the CPU: as is).

Test: ``pytest tests/test_fsdp_moves.py``
"""

from __future__ import annotations

import dataclasses

import torch

from minidp.fsdp.policy import cast_floating, map_tensors
from minidp.fsdp.root import ensure_root
from minidp.fsdp.unit import unit_of


def register(module) -> None:
    module.register_forward_pre_hook(pre_forward, with_kwargs=True)
    module.register_forward_hook(post_forward)


def pre_forward(module, args, kwargs):
    unit = unit_of(module)
    root = ensure_root(module)  # the outermost unit's first forward: the root
    if not unit.to_run:  # this unit's pass starts here
        unit.to_run = {id(m) for m in unit.modules}
        root.pre_forward(unit)
        if unit is root.unit and unit.device.type != "cpu":
            device = unit.device
            args, kwargs = map_tensors(lambda t: t.to(device), (args, kwargs))
        if torch.is_grad_enabled() and not any(unit.requires_grad):
            _hook_frozen(unit, (args, kwargs))
    if unit.mp.param_dtype is not None and unit.mp.cast_forward_inputs:
        dtype = unit.mp.param_dtype
        args, kwargs = cast_floating(args, dtype), cast_floating(kwargs, dtype)
    return args, kwargs


def post_forward(module, args, output):
    unit = unit_of(module)
    root = unit.root
    unit.to_run.discard(id(module))
    if not unit.to_run:  # the unit's pass is complete
        root.post_forward(unit)
    _hook_backward(unit, output)
    if unit is root.unit:  # units of a group whose modules the forward skipped: finished
        for u in root.units:
            if u.to_run and u is not unit:
                u.to_run.clear()
                root.post_forward(u)
                _hook_backward(u, output)  # gathered again when backward reaches the output
    if unit.mp.output_dtype is not None:  # after the hooks, like FSDP2: gradients pass the cast
        output = cast_floating(output, unit.mp.output_dtype)
    return output


def _hook_backward(unit, output) -> None:
    if not torch.is_grad_enabled():
        return
    root = unit.root

    def pre_backward(grad):  # a gradient reached this unit's output (again: idempotent)
        root.pre_backward(unit)

    for t in _tensors(output):
        if t.requires_grad:
            t.register_hook(pre_backward)


def _hook_frozen(unit, inputs) -> None:
    """A unit without trainable parameters has no gradient to say its backward is done:
    the gradient reaching its inputs does (then it is freed, FSDP2's post-backward)."""
    root = unit.root

    def done(grad):
        root.frozen_backward_done(unit)

    for t in _tensors(inputs):
        if t.requires_grad:
            t.register_hook(done)


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):  # e.g. a ModelOutput-like return value
            yield from _tensors(getattr(value, field.name))
