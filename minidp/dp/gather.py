"""Gather: put the replicas' outputs back together on one device (the main device's extra load).

Test: ``pytest tests/test_dp_scatter_gather.py -k gather``

Same rules as ``torch.nn.parallel.gather``:

* tensors are moved to ``target_device`` and concatenated along ``dim``. If every output is
  a 0-dim tensor (a per-replica loss, say) and ``dim == 0``, each becomes a 1-element
  vector first, with a warning: the result has one entry per replica, not a scalar;
* dicts are gathered key by key, namedtuples / tuples / lists member by member;
* ``None`` gathers to ``None``.

Errors say what did not match: dicts with different keys (torch only checks the key
*count*), containers of different lengths, tensors whose other dims differ, and types that
cannot be concatenated (a Python float, a string).

The backward pass needs nothing special: ``torch.cat`` hands each replica the slice of the
gradient that matches its rows, and ``.to`` sends it back to the replica's device.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from minidp.dp.devices import DeviceLike, as_device
from minidp.dp.scatter import is_namedtuple

_SCALAR_WARNING = (
    "DataParallel: every replica returned a 0-dim tensor; gathering along dim 0 makes a "
    "vector with one entry per replica (reduce it, e.g. .mean(), to get one number)"
)


def gather_tensors(tensors: list[torch.Tensor], target: torch.device, dim: int) -> torch.Tensor:
    """Concatenate the replicas' tensors along ``dim`` on ``target`` (differentiable)."""
    if all(t.dim() == 0 for t in tensors) and dim == 0:
        warnings.warn(_SCALAR_WARNING, stacklevel=3)
        tensors = [t.view(1) for t in tensors]  # () -> (1,)
    shapes = [tuple(t.shape) for t in tensors]
    first = shapes[0]
    for i, shape in enumerate(shapes):
        if len(shape) != len(first) or not -len(first) <= dim < len(first):
            raise ValueError(
                f"DataParallel: cannot gather outputs of shapes {shapes} along dim={dim}; "
                f"expected tensors with the same number of dims (> {dim}) — replica {i} "
                f"differs; return tensors with a batch dimension at dim {dim}"
            )
        others = [s for k, s in enumerate(shape) if k != dim % len(shape)]
        if others != [s for k, s in enumerate(first) if k != dim % len(first)]:
            raise ValueError(
                f"DataParallel: cannot gather outputs of shapes {shapes} along dim={dim}; "
                f"expected equal sizes in every other dim but replica {i} has {shape} vs "
                f"{first} — outputs must differ only in the batch dimension"
            )
    return torch.cat([t.to(target) for t in tensors], dim=dim)


def gather(outputs: list[Any], target_device: DeviceLike, dim: int = 0) -> Any:
    """Merge one output per replica into one output on ``target_device``.

    Args:
        outputs: the replicas' outputs, in replica order, all of the same structure.
        target_device: where the result lives (PyTorch's ``output_device``).
        dim: the batch dimension to concatenate along.

    Raises:
        ValueError: the outputs cannot be put together (see the module docstring).
    """
    target = as_device(target_device)

    def gather_map(outs: list[Any]) -> Any:
        first = outs[0]
        if isinstance(first, torch.Tensor):
            if not all(isinstance(o, torch.Tensor) for o in outs):
                got = [type(o).__name__ for o in outs]
                raise ValueError(
                    f"DataParallel: cannot gather outputs of types {got}; expected a tensor "
                    f"from every replica — return the same kind of value from every chunk"
                )
            return gather_tensors(list(outs), target, dim)
        if first is None:
            return None
        if isinstance(first, dict):
            keys = list(first)
            for i, d in enumerate(outs):
                if not isinstance(d, dict) or set(d) != set(keys):
                    got = sorted(d) if isinstance(d, dict) else type(d).__name__
                    raise ValueError(
                        f"DataParallel: cannot gather dicts with different keys: replica 0 "
                        f"returned keys {sorted(keys)} but replica {i} returned {got} — "
                        f"return the same keys from every chunk"
                    )
            return type(first)((k, gather_map([d[k] for d in outs])) for k in keys)
        if isinstance(first, tuple | list):
            lengths = [len(o) if isinstance(o, tuple | list) else None for o in outs]
            if any(n != len(first) for n in lengths):
                raise ValueError(
                    f"DataParallel: cannot gather {type(first).__name__}s of lengths {lengths}; "
                    f"expected every replica to return {len(first)} items — return the same "
                    f"structure from every chunk"
                )
            members = [gather_map(list(column)) for column in zip(*outs)]
            if is_namedtuple(first):
                return type(first)(*members)
            return type(first)(members)
        raise ValueError(
            f"DataParallel: cannot gather outputs of type {type(first).__name__} "
            f"(replica 0 returned {first!r}); expected tensors, or tuples / lists / dicts / "
            f"namedtuples of tensors, or None — return a tensor, e.g. torch.tensor(value)"
        )

    return gather_map(list(outputs))
