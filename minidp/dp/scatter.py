"""Scatter: cut the batch into one chunk per device; rebuild every container around it.

Test: ``pytest tests/test_dp_scatter_gather.py -k scatter``

torch's rules (``torch.nn.parallel.scatter``): a tensor splits with ``tensor.chunk(n, dim)``,
which rounds up, so a small batch gives fewer chunks (4 devices, batch 5 -> [2, 2, 1]) and
DataParallel uses fewer replicas; tuples, lists, namedtuples and dicts are rebuilt per
device around their scattered members; anything else is repeated by reference (not
copied). Gradients flow back through ``chunk`` and ``.to``.

Errors where torch goes on silently: tensors that split into different chunk counts
(torch's ``zip`` stops at the shortest and drops rows: lost samples), an empty batch, and
a 0-dim tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from minidp.dp.devices import DeviceLike, as_device


def is_namedtuple(obj: Any) -> bool:
    """True for instances of ``collections.namedtuple`` / ``typing.NamedTuple`` classes."""
    return isinstance(obj, tuple) and hasattr(obj, "_fields") and hasattr(obj, "_asdict")


def split_tensor(tensor: torch.Tensor, devices: Sequence[torch.device], dim: int) -> tuple:
    """``tensor.chunk(len(devices), dim)`` (maybe fewer chunks), chunk ``i`` on ``devices[i]``."""
    shape = tuple(tensor.shape)
    if tensor.dim() == 0:
        raise ValueError(
            f"DataParallel: cannot split a 0-dim tensor (value {tensor.item()!r}) along dim "
            f"{dim}; expected a tensor with a batch dimension — pass plain numbers as Python "
            f"values (they are repeated per device) or give the tensor a batch dimension"
        )
    if not -tensor.dim() <= dim < tensor.dim():
        raise ValueError(
            f"DataParallel: cannot split an input of shape {shape} along dim={dim}; expected "
            f"dim in {-tensor.dim()}..{tensor.dim() - 1} — pass DataParallel(..., dim=...) "
            f"matching the batch dimension of every input tensor"
        )
    if tensor.shape[dim] == 0:
        raise ValueError(
            f"DataParallel: got an empty batch (input shape {shape}, size 0 along dim {dim}); "
            f"expected at least 1 sample — skip empty batches before calling the model"
        )
    chunks = tensor.chunk(len(devices), dim)  # sizes ceil(B/n), ..., the rest
    return tuple(chunk.to(device) for chunk, device in zip(chunks, devices))


def scatter(inputs: Any, target_gpus: Sequence[DeviceLike], dim: int = 0) -> Any:
    """Split ``inputs`` into one copy of its structure per device, tensors chunked on ``dim``:
    a tuple of chunks for a tensor, else a list (``scatter((x, 3), [0, 1])`` -> ``[(x0, 3),
    (x1, 3)]``, as torch). ``target_gpus``: torch's name; ``"cpu"`` entries are simulated."""
    devices = [as_device(d) for d in target_gpus]
    splits: list[tuple[tuple[int, ...], tuple]] = []  # (shape, chunks) of every tensor

    def scatter_map(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            splits.append((tuple(obj.shape), split_tensor(obj, devices, dim)))
            return splits[-1][1]
        # For each container: scatter every member, then zip the per-device pieces back.
        if is_namedtuple(obj):
            return [type(obj)(*members) for members in zip(*map(scatter_map, obj))]
        if isinstance(obj, tuple) and obj:
            return list(zip(*map(scatter_map, obj)))
        if isinstance(obj, list) and obj:
            return [list(members) for members in zip(*map(scatter_map, obj))]
        if isinstance(obj, dict) and obj:
            # Each (key, value) item scatters to [(key, v0), (key, v1), ...].
            return [type(obj)(items) for items in zip(*map(scatter_map, obj.items()))]
        return [obj for _ in devices]  # not splittable: the same object on every device

    scattered = scatter_map(inputs)
    check_no_rows_dropped(splits, len(devices), dim)
    return scattered


def check_no_rows_dropped(splits: list[tuple[tuple[int, ...], tuple]], n: int, dim: int) -> None:
    """Refuse tensors that split into different chunk counts (``zip`` would drop rows)."""
    counts = [len(chunks) for _, chunks in splits]
    if len(set(counts)) <= 1:
        return
    used = min(counts)
    shape, chunks = next((s, c) for s, c in splits if len(c) > used)
    lost = sum(c.shape[dim] for c in chunks[used:])
    found = ", ".join(f"{s} -> {len(c)}" for s, c in splits)
    raise ValueError(
        f"DataParallel: input tensors split into different numbers of chunks on {n} devices "
        f"(shape -> chunks along dim {dim}: {found}); only {used} replicas could run and "
        f"the input of shape {shape} would lose its last {lost} of {shape[dim]} rows "
        f"(torch.nn.DataParallel drops them silently) — expected every tensor to have the "
        f"same size along dim {dim}; pass inputs of equal batch size"
    )


def scatter_kwargs(
    inputs: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    target_gpus: Sequence[DeviceLike],
    dim: int = 0,
) -> tuple[tuple[Any, ...], tuple[dict[str, Any], ...]]:
    """Scatter args and kwargs together: ``(inputs_per_device, kwargs_per_device)``, equally
    long, replica ``i`` called as ``module(*inputs_per_device[i], **kwargs_per_device[i])``;
    both empty for no arguments."""
    kwargs = kwargs or {}
    if not inputs and not kwargs:
        return (), ()
    # one structure: an empty side is padded as torch means to, uneven splits refused
    pairs = scatter((tuple(inputs), kwargs), target_gpus, dim)  # [(args_i, kwargs_i), ...]
    return tuple(args for args, _ in pairs), tuple(kw for _, kw in pairs)
