"""Gather: put the replicas' outputs back together on one device (the main device's extra load).

Test: ``pytest tests/test_dp_scatter_gather.py -k gather``

torch's rules (``torch.nn.parallel.gather``): tensors are concatenated along ``dim`` on
``target_device`` (0-dim ones, e.g. per-replica losses, become a vector, with a warning);
dicts key by key, sequences member by member, ``None`` to ``None``. Errors name what did
not match, including dicts with other keys (torch checks only the count). Backward is
``torch.cat``'s and ``.to``'s: each replica gets its rows' slice of the gradient.
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
    """Merge the replicas' outputs (in replica order, one structure) on ``target_device``."""
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
