"""Scatter: cut the batch into one chunk per device; rebuild every container around it.

Test: ``pytest tests/test_dp_scatter_gather.py -k scatter``

Same rules as ``torch.nn.parallel.scatter`` / ``scatter_kwargs``:

* a tensor is split with ``tensor.chunk(n, dim)``. ``chunk`` rounds the chunk size *up*,
  so a small batch gives fewer chunks than devices (4 devices: batch 5 -> [2, 2, 1],
  batch 3 -> [1, 1, 1]) and DataParallel then uses fewer replicas;
* tuples, lists, namedtuples and dicts are rebuilt once per device around their scattered
  members (``zip``), so every tensor must split into the same number of chunks;
* anything else (ints, strings, ``None``, empty containers) is repeated, one reference per
  device (not copied: a replica that mutates it mutates everyone's).

Three deliberate differences, each an error where torch goes on silently:

* tensors that split into different numbers of chunks (3 devices: 6 rows -> 3 chunks, 2
  rows -> 2 chunks). torch's ``zip`` stops at the shortest, so only 2 replicas run and
  rows 4-5 of the first input are dropped without a word — in training, lost samples.
  Equal batch sizes (the usual case) always split alike;
* an empty batch (torch runs every replica on an empty chunk);
* a tensor that has no ``dim`` to split (torch fails deep inside a copy kernel).

``scatter_kwargs`` pads the shorter of inputs and kwargs to the same length (``()`` /
``{}``), which is what torch's padding means to do.

Gradients flow back through ``chunk`` and ``.to`` (ordinary differentiable ops), so the
gradient of the input is the replicas' gradients put back side by side.
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
    """``tensor.chunk(len(devices), dim)``, chunk ``i`` moved to ``devices[i]``.

    Returns as many chunks as ``chunk`` makes, which can be fewer than ``len(devices)``.

    Raises:
        ValueError: 0-dim tensor, ``dim`` out of range, or an empty batch.
    """
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
    """Split ``inputs`` into one copy of its structure per device, tensors chunked on ``dim``.

    Args:
        inputs: a tensor, or any nesting of tuple / list / namedtuple / dict around tensors.
        target_gpus: the devices (PyTorch's name; ``"cpu"`` entries are simulated devices).
        dim: the batch dimension of every tensor.

    Returns:
        A tuple of chunks for a tensor, otherwise a list with one rebuilt structure per
        device (as torch: ``scatter((x, 3), [0, 1])`` -> ``[(x0, 3), (x1, 3)]``).
    """
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
    """Scatter positional and keyword arguments together, one ``(args, kwargs)`` per device.

    Returns:
        ``(inputs_per_device, kwargs_per_device)``, equally long: replica ``i`` is called as
        ``module(*inputs_per_device[i], **kwargs_per_device[i])``. Both are empty when there
        is nothing to scatter.
    """
    kwargs = kwargs or {}
    if not inputs and not kwargs:
        return (), ()
    # Scattering the pair as one structure pads an empty side (``()`` / ``{}`` repeated,
    # as torch pads) and, when both sides hold tensors, stops at the shorter split like
    # every other container — torch compares against the unscattered length instead and
    # fails later in parallel_apply.
    pairs = scatter((tuple(inputs), kwargs), target_gpus, dim)  # [(args_i, kwargs_i), ...]
    return tuple(args for args, _ in pairs), tuple(kw for _, kw in pairs)
