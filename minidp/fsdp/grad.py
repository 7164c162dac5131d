"""``ShardedGrad``: a shard's ``.grad`` that knows it is a shard, so norms over it are global.

Why it exists: ``torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`` computes one
norm per gradient and the norm of those. On plain tensors each rank would see only its own
shard: rank 0 clips by 0.37, rank 1 by 0.64, where one process clips by their global 0.74 —
the replicas then drift apart, silently. FSDP2's gradients are DTensors: a norm of a
``Shard(0)`` DTensor is a *partial* norm, turned into the global one (``x**p``, all-reduce
sum, ``x**(1/p)``; max for ``inf``) when it is used. This subclass does the same for the
calls ``clip_grad_norm_`` makes, so the ordinary call gives FSDP2's answer, bit for bit:

* ``torch.linalg.vector_norm(grad)`` (and ``grad.norm()``, ``torch.norm(grad)``) of a whole
  shard returns a ``PartialNorm``: this rank's norm, not yet usable;
* ``torch.stack`` of partial norms and ``.to()`` keep them partial (the per-gradient norms
  ``clip_grad_norm_`` stacks);
* anything else done with a ``PartialNorm`` first reduces it across the group — one
  collective, which every rank reaches because every rank clips the same parameters. So
  ``vector_norm`` of the stack reduces the stacked per-gradient norms (one all-reduce of a
  vector) and takes the norm of the global ones, the order DTensor uses (measured: reducing
  the rank's total instead differs in the last bit).

Every other operation on a ``ShardedGrad`` runs as on a plain tensor and returns plain
tensors (an optimizer step gives the same bits as before). ``.to_local()`` gives the plain
shard. Test: ``pytest tests/test_fsdp.py -k clip``
"""

from __future__ import annotations

import math

import torch

from minidp.comm import all_reduce

_NORMS = {torch.linalg.vector_norm, torch.norm, torch.Tensor.norm}
_KEEP_PARTIAL = {torch.stack, torch.Tensor.to}


def _plain(value):
    """``value`` with every ShardedGrad/PartialNorm in it seen as a plain tensor."""
    if isinstance(value, (ShardedGrad, PartialNorm)):
        return value.as_subclass(torch.Tensor)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def norm_order(func, args, kwargs) -> float | None:
    """The p of a norm over *all* elements, or None when the call is something else."""
    if func not in _NORMS:
        return None
    p = kwargs.get("ord", kwargs.get("p", args[1] if len(args) > 1 else 2))
    dim = kwargs.get("dim", args[2] if len(args) > 2 else None)
    if p == "fro" and dim is None:  # Tensor.norm()'s default: the 2-norm of every element
        p = 2
    if dim is not None or isinstance(p, str) or p is None:
        return None  # a norm along a dimension, or 'nuc': rank-local (see to_local)
    return float(p)


class ShardedGrad(torch.Tensor):
    """This rank's rows of a gradient; norms over it are partial (see the module doc)."""

    group = None  # the process group the gradient is sharded over

    @staticmethod
    def wrap(shard: torch.Tensor, group) -> ShardedGrad:
        grad = shard.as_subclass(ShardedGrad)  # the same storage, no copy
        grad.group = group
        return grad

    def to_local(self) -> torch.Tensor:
        return self.as_subclass(torch.Tensor)

    def __reduce_ex__(self, protocol):  # copy / pickle as the plain shard (no group inside)
        return self.to_local().__reduce_ex__(protocol)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # with subclass dispatch off, results come back plain, and an in-place op (the
        # ``grad += g`` of accumulation, clipping's ``mul_``) returns this same ShardedGrad.
        # (torch._C.DisableTorchFunctionSubclass is the idiom torch's own "extending torch"
        # notes give for a __torch_function__ that calls the real op; no public alias exists.)
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **kwargs)
        p = norm_order(func, args, kwargs)
        if p is not None and isinstance(args[0], ShardedGrad):
            return PartialNorm.wrap(result, args[0].group, p)
        return result


class PartialNorm(torch.Tensor):
    """One rank's share of a p-norm; becomes the global norm when used (a collective)."""

    group = None
    p = 2.0

    @staticmethod
    def wrap(local: torch.Tensor, group, p: float) -> PartialNorm:
        norm = local.as_subclass(PartialNorm)
        norm.group, norm.p = group, p
        return norm

    def full_tensor(self) -> torch.Tensor:
        """The global norm (DTensor's name): ``x**p``, all-reduce sum, ``x**(1/p)``."""
        local = self.as_subclass(torch.Tensor)
        if math.isinf(self.p):  # max (min for -inf) needs no power
            op = "max" if self.p > 0 else "min"
            return all_reduce(local.clone(), op=op, group=self.group)
        total = all_reduce(local**self.p, op="sum", group=self.group)
        return total ** (1.0 / self.p)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        partial = [a for a in _flat([args, kwargs]) if isinstance(a, PartialNorm)]
        first = partial[0]
        if func in _KEEP_PARTIAL or getattr(func, "__name__", "") == "__get__":
            # a stack of shares, a device move, or reading an attribute (dtype, shape): no
            # reduction needed yet
            with torch._C.DisableTorchFunctionSubclass():
                result = func(*_plain(args), **_plain(kwargs))
            if isinstance(result, torch.Tensor) and not isinstance(result, PartialNorm):
                result = PartialNorm.wrap(result, first.group, first.p)
            return result
        # any other use needs the global value: reduce first (every rank gets here too)
        full = {id(x): x.full_tensor() for x in partial}
        args, kwargs = _replace(args, full), _replace(kwargs, full)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*_plain(args), **_plain(kwargs))


def _flat(value):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flat(v)
    else:
        yield value


def _replace(value, by_id: dict):
    if id(value) in by_id:
        return by_id[id(value)]
    if isinstance(value, (list, tuple)):
        return type(value)(_replace(v, by_id) for v in value)
    if isinstance(value, dict):
        return {k: _replace(v, by_id) for k, v in value.items()}
    return value
