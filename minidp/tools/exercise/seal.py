"""A seal on the checker's and torch's own code, in the sandbox: a file that patches them is
caught as tampering.

The verdict is computed in the judge's process, which the learner's code cannot reach —
so a patch in the sandbox changes nothing that decides the grade. It is still an
attempt, and the check says so: a :class:`Seal` is taken *before* the learner's file is
imported — which object every function, class and module name points to in minidp's
modules, in the classes they define, in ``torch``, ``torch.Tensor``,
``torch.distributed``, the process-group classes, ``torch.testing`` and ``builtins``, and
which code object every sealed function runs — and :meth:`Seal.broken` is asked after the
import and after every case. Names added later (lazy imports) are fine; a name re-pointed
or removed, or a function whose ``__code__`` was swapped, is a broken seal.

Plain values (counters, flags, caches) may change while minidp runs and are not sealed.

Test: ``pytest tests/test_exercise_guards.py -k seal``
"""

from __future__ import annotations

import builtins
import inspect
import sys
import types

import torch
import torch.distributed as dist

_SEALED_KINDS = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ModuleType,
    type,
    staticmethod,
    classmethod,
    property,
)


def _namespaces() -> list[tuple[str, object]]:
    """(label, module or class) pairs to seal: minidp's modules and classes, torch's core."""
    spaces: list[tuple[str, object]] = [
        (name, module)
        for name, module in list(sys.modules.items())
        if module is not None and (name == "minidp" or name.startswith("minidp."))
    ]
    spaces += [
        ("torch", torch),
        ("torch.Tensor", torch.Tensor),
        ("torch.distributed", dist),
        ("torch.testing", torch.testing),
        ("torch.nn.functional", torch.nn.functional),
        ("torch.nn.parallel", torch.nn.parallel),
        ("builtins", builtins),
    ]
    if dist.is_available():
        spaces += [("ProcessGroup", dist.ProcessGroup), ("ProcessGroupGloo", dist.ProcessGroupGloo)]
    out = []
    for label, space in spaces:
        out.append((label, space))
        if isinstance(space, types.ModuleType) and label.startswith("minidp"):
            for name, value in list(vars(space).items()):  # classes defined there: methods
                if inspect.isclass(value) and value.__module__ == label:
                    out.append((f"{label}.{name}", value))
    return out


def _sealable(value) -> bool:
    # type(), not isinstance or callable: both ask the object, and deprecated names warn
    return issubclass(type(value), _SEALED_KINDS)


def _torch_wrapper_of(value, original) -> bool:
    """torch re-points a few of its own names once, wrapping the original: importing
    ``torch._dynamo`` (the first optimizer does) replaces ``torch.manual_seed`` by a
    ``functools.wraps`` wrapper of it. That is torch, not the learner."""
    return getattr(value, "__wrapped__", None) is original and str(
        getattr(value, "__module__", "")
    ).startswith("torch")


class Seal:
    """Which object each sealed name pointed to when the seal was taken."""

    def __init__(self) -> None:
        # (label, the namespace, {name: the object it held}): holding the objects keeps
        # them alive, so an identity test cannot be fooled by a reused id
        self._spaces = [
            (label, owner, {k: v for k, v in list(vars(owner).items()) if _sealable(v)})
            for label, owner in _namespaces()
        ]
        self._code = {  # (label, name) -> the code object the function ran when sealed
            (label, name): value.__code__
            for label, _, sealed in self._spaces
            for name, value in sealed.items()
            if isinstance(value, types.FunctionType)
        }

    def broken(self) -> list[str]:
        """``["minidp.tools.exercise.reference.all_reduce", ...]``: names changed since."""
        changed = []
        for label, owner, sealed in self._spaces:
            space = vars(owner)
            for name, original in list(sealed.items()):
                value = space.get(name, _MISSING)
                if value is original:
                    code = self._code.get((label, name))
                    if code is not None and value.__code__ is not code:
                        changed.append(f"{label}.{name}.__code__")
                    continue
                if _torch_wrapper_of(value, original):
                    sealed[name] = value  # torch's own, once: the wrapper is what stays
                    continue
                changed.append(f"{label}.{name}")
        return changed


_MISSING = object()


def explain(changed: list[str], when: str) -> str:
    """The finding for a broken seal."""
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return (
        f"your file changed the checker's or torch's own code {when}: {shown}. The verdict "
        "is computed in another process, which such a change cannot reach — and changing the "
        "checker counts as tampering."
    )
