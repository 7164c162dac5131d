"""Replicate: one cheap copy of the module per device, wired to a differentiable broadcast.

Test: ``pytest tests/test_dp_replicate.py``

Every forward builds fresh replicas, as torch's does. Parameters go through
:class:`Broadcast`: device 0 gets the originals, the others copies, and backward sums the
replicas' gradients onto device 0 in device order, ``((g0 + g1) + g2) + ...``: the whole
"parameter server". Buffers are copied detached; replica 0 holds the originals, so only
its updates persist, as in torch. Modules are shallow copies sharing everything but their
tensor tables, and their tensors are plain attributes, so ``replica.parameters()`` is
empty, like torch's replicas.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from minidp.dp.devices import DeviceLike, as_device


class Broadcast(torch.autograd.Function):
    """Copies of tensors on every device; backward = sum of the copies' gradients."""

    @staticmethod
    def forward(ctx, devices: Sequence[torch.device], *tensors: torch.Tensor):
        ctx.source = tensors[0].device
        ctx.num_tensors = len(tensors)
        outputs = []  # device-major: [t0@d0, t1@d0, ..., t0@d1, t1@d1, ...]
        for slot, device in enumerate(devices):
            for t in tensors:
                # slot 0: the input itself (autograd makes it a view): the model's storage
                outputs.append(t if slot == 0 else t.to(device, copy=True))
        frozen = [
            outputs[slot * len(tensors) + i]
            for i, needs in enumerate(ctx.needs_input_grad[1:])
            if not needs
            for slot in range(len(devices))
        ]
        ctx.mark_non_differentiable(*frozen)
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        n = ctx.num_tensors
        sums = []
        for i in range(n):
            if not ctx.needs_input_grad[1 + i]:  # a frozen parameter: nothing to send back
                sums.append(None)
                continue
            per_device = grads[i::n]  # tensor i's gradient from each replica, device order
            # ((g0 + g1) + g2) + ...: float addition is not associative, the order counts
            total = per_device[0].to(ctx.source)
            for g in per_device[1:]:
                total = total + g.to(ctx.source)
            sums.append(total)
        return (None, *sums)


def broadcast(
    tensors: Sequence[torch.Tensor], devices: Sequence[torch.device], detach: bool = False
) -> list[list[torch.Tensor]]:
    """``tensors`` (on ``devices[0]``) on every device, ``result[slot][i]``; slot 0: originals."""
    if not tensors:
        return [[] for _ in devices]
    if detach:
        return [[_plain_copy(t, slot, d) for t in tensors] for slot, d in enumerate(devices)]
    flat = Broadcast.apply(list(devices), *tensors)
    n = len(tensors)
    return [list(flat[slot * n : (slot + 1) * n]) for slot in range(len(devices))]


def _plain_copy(t: torch.Tensor, slot: int, device: torch.device) -> torch.Tensor:
    """Slot 0 keeps the original tensor; other slots get a copy without autograd history."""
    if slot > 0:
        return t.detach().to(device, copy=True)
    # a Parameter detached (same storage), so the replica does not adopt it; a buffer as is
    return t.detach() if isinstance(t, nn.Parameter) else t


def check_on_device(module: nn.Module, device: torch.device, role: str = "device_ids[0]") -> None:
    """Raise if any parameter or buffer of ``module`` is not on ``device``."""
    named = [("parameter", n, t) for n, t in module.named_parameters()]
    named += [("buffer", n, t) for n, t in module.named_buffers()]
    for kind, name, t in named:
        if t.device != device:
            raise RuntimeError(
                f"DataParallel: {kind} '{name}' is on {t.device} but {role} is {device} — "
                f"move the model with .to({str(device)!r}) first"
            )


def shallow_copy(module: nn.Module) -> nn.Module:
    """A new module object sharing everything with ``module`` but its own ``_parameters``,
    ``_buffers`` and ``_modules`` dicts (``torch.func.functional_call`` would swap tensors on
    the shared module instead, which threads running side by side cannot do)."""
    replica = module.__new__(type(module))
    replica.__dict__ = module.__dict__.copy()  # config, hooks, training flag: shared refs
    # only absent parameters stay (bias=False: still None); the copies become attributes
    replica._parameters = {k: None for k, v in module._parameters.items() if v is None}
    replica._buffers = dict(module._buffers)
    replica._modules = dict(module._modules)
    return replica


def replicate(
    network: nn.Module, devices: Sequence[DeviceLike], detach: bool = False
) -> list[nn.Module]:
    """One replica of ``network`` (all on ``devices[0]``, else a RuntimeError) per device;
    replica 0 shares the original tensors. ``detach``: no autograd (under ``no_grad``)."""
    devices = [as_device(d) for d in devices]
    if not devices:
        return []
    check_on_device(network, devices[0], role="devices[0]")

    params = list(network.parameters())  # de-duplicated: tied weights appear once
    param_slot = {id(p): i for i, p in enumerate(params)}
    param_copies = broadcast(params, devices, detach)  # [replica][param]

    # buffers that require grad (rare) are differentiable like parameters
    buffers = list(network.buffers())
    grad_buffers = [b for b in buffers if b.requires_grad and not detach]
    plain_buffers = [b for b in buffers if not (b.requires_grad and not detach)]
    buffer_copies = {}  # id(original buffer) -> per-replica copies
    for group, copies in (
        (grad_buffers, broadcast(grad_buffers, devices, detach=False)),
        (plain_buffers, broadcast(plain_buffers, devices, detach=True)),
    ):
        for i, b in enumerate(group):
            buffer_copies[id(b)] = [copies[slot][i] for slot in range(len(devices))]

    modules = list(network.modules())  # de-duplicated: a shared submodule stays shared
    module_slot = {id(m): i for i, m in enumerate(modules)}
    replicas = [[shallow_copy(m) for m in modules] for _ in devices]  # [replica][module]

    for slot, copies in enumerate(replicas):
        for m, replica in zip(modules, copies):
            # the tables, not named_*(), which skip None and repeated objects' names
            for key, child in m._modules.items():
                if child is not None:
                    replica._modules[key] = copies[module_slot[id(child)]]
            for key, p in m._parameters.items():
                if p is not None:
                    # Not an nn.Parameter any more: a non-leaf tensor, a plain attribute.
                    setattr(replica, key, param_copies[slot][param_slot[id(p)]])
            for key, b in m._buffers.items():
                if b is not None:
                    replica._buffers[key] = buffer_copies[id(b)][slot]
    return [copies[0] for copies in replicas]
