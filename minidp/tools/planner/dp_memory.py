"""Where the bytes are: a per-device table for one DataParallel training step.

Run it: ``python -m minidp bench dp`` (prints one), or in Python::

    dp = minidp.DataParallel(model, device_ids=["cpu"] * 4)
    print(minidp.tools.planner.dp_memory.memory_report(dp, x, loss_fn=lambda out: out.sum()))

One forward and backward through the model's own steps (scatter, replicate,
parallel_apply, gather), counting per replica slot: ``params`` (the replica's parameters
and buffers; slot 0: the model), ``inputs`` (its chunk), ``activations`` (what autograd
saved for backward in its forward: ``saved_tensors_hooks``), ``outputs`` (plus the
gathered output on ``output_device``), ``grads`` (its parameter gradients, plus the summed
gradient in ``.grad`` on the main device). A tensor counts once per slot. On GPUs the table
also shows ``torch.cuda.memory_allocated`` before the step and the peak during it. The main
device's extra rows are DataParallel's imbalance, the reason DDP exists. ``.grad`` is
restored afterwards; a BatchNorm's running statistics are updated, as by any training step.

Test: ``pytest tests/test_dp_memory.py``
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from minidp.dp.devices import slot_label

COLUMNS = ("params", "inputs", "activations", "outputs", "grads")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor inside a nest of tuples / lists / dicts."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, list | tuple):
        return [t for item in obj for t in _tensors(item)]
    return []


def format_bytes(n: int | None) -> str:
    """``1536`` -> ``'1.5 KiB'``; ``None`` -> ``'-'``."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # not reached


@dataclass
class DeviceBytes:
    """Bytes held by one replica slot during the step (see the module docstring)."""

    device: str
    params: int = 0
    inputs: int = 0
    activations: int = 0
    outputs: int = 0
    grads: int = 0
    cuda_before: int | None = None  # torch.cuda.memory_allocated before the step
    cuda_peak: int | None = None  # torch.cuda.max_memory_allocated during the step
    device_obj: torch.device | None = field(default=None, repr=False)
    _seen: set = field(default_factory=set, repr=False)

    @property
    def total(self) -> int:
        return sum(getattr(self, c) for c in COLUMNS)

    def add(self, column: str, t: torch.Tensor) -> None:
        """Count ``t`` under ``column`` unless this slot already counted these bytes."""
        key = (t.device, t.data_ptr(), _nbytes(t))
        if key not in self._seen:
            self._seen.add(key)
            setattr(self, column, getattr(self, column) + _nbytes(t))


@dataclass
class MemoryReport:
    """Per-device byte table; ``print(report)`` shows it, ``report.rows[0]`` is the main."""

    rows: list[DeviceBytes]
    simulated: bool

    def __str__(self) -> str:
        cuda = not self.simulated and self.rows and self.rows[0].cuda_peak is not None
        head = ["device", *COLUMNS, "total"] + (["cuda before", "cuda peak"] if cuda else [])
        lines = []
        for i, r in enumerate(self.rows):
            cells = [r.device + (" (main)" if i == 0 else "")]
            cells += [format_bytes(getattr(r, c)) for c in COLUMNS] + [format_bytes(r.total)]
            if cuda:
                cells += [format_bytes(r.cuda_before), format_bytes(r.cuda_peak)]
            lines.append(cells)
        widths = [max(len(row[k]) for row in [head, *lines]) for k in range(len(head))]
        fmt = lambda cells: "  ".join(  # noqa: E731 - left column left-aligned, numbers right
            c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths))
        )
        out = [fmt(head), fmt(["-" * w for w in widths]), *map(fmt, lines)]
        if len(self.rows) > 1:
            others = sum(r.total for r in self.rows[1:]) / (len(self.rows) - 1)
            out.append(
                f"main device holds {self.rows[0].total / max(others, 1):.2f}x the bytes of an "
                f"average other device (gathered outputs + summed grads live there)"
            )
        how = "counted tensor bytes per replica (simulated CPU devices share one memory)"
        if not self.simulated:
            how = "counted tensor bytes; cuda columns from torch.cuda.memory_allocated"
        out.append(f"[{how}]")
        return "\n".join(out)


def memory_report(
    model: Any,
    *inputs: Any,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    **kwargs: Any,
) -> MemoryReport:
    """Run one forward + backward of ``model`` (a minidp ``DataParallel``) and count bytes.

    Args:
        model: a ``minidp.DataParallel`` with devices (simulated or CUDA).
        *inputs: the batch, as for ``model(*inputs, **kwargs)``.
        loss_fn: output -> scalar loss (default: sum of every output tensor).
        **kwargs: keyword inputs of the model.
    """
    if not model.device_ids:
        raise ValueError(
            "memory_report: expected a DataParallel with devices but got device_ids=[] "
            "(the plain-module case) — pass device_ids=['cpu'] * n to simulate n devices"
        )
    if loss_fn is None:
        loss_fn = lambda out: sum(t.float().sum() for t in _tensors(out))  # noqa: E731
    params = list(model.module.parameters())
    saved_grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    cuda_devices = sorted({d for d in model.device_ids if d.type == "cuda"}, key=str)
    before = {d: torch.cuda.memory_allocated(d) for d in cuda_devices}
    for d in cuda_devices:
        torch.cuda.reset_peak_memory_stats(d)
    try:
        rows = _one_step(model, inputs, kwargs, loss_fn)
    finally:
        for p, g in zip(params, saved_grads):
            p.grad = g
    for r in rows:
        if r.device_obj.type == "cuda":
            r.cuda_before = before[r.device_obj]
            r.cuda_peak = torch.cuda.max_memory_allocated(r.device_obj)
    return MemoryReport(rows=rows, simulated=model.device_ids[0].type == "cpu")


def _one_step(model: Any, inputs: tuple, kwargs: dict, loss_fn: Callable) -> list[DeviceBytes]:
    """DataParallel.forward's steps, each replica wrapped so its tensors are counted."""
    scattered, scattered_kwargs = model.scatter(inputs, kwargs, model.device_ids)
    if not scattered and not scattered_kwargs:
        scattered, scattered_kwargs = ((),), ({},)
    used = model.device_ids[: len(scattered)]
    rows = [DeviceBytes(slot_label(used, i), device_obj=d) for i, d in enumerate(used)]
    replicas = model.replicate(model.module, used)
    lock = threading.Lock()
    replica_grads: list[list[int]] = [[] for _ in used]

    for row, replica, args, kw in zip(rows, replicas, scattered, scattered_kwargs):
        for t in _tensor_attrs(replica):
            row.add("params", t)
        for t in _tensors((args, kw)):
            row.add("inputs", t)

    def counted(slot: int) -> Callable:
        saved: list[torch.Tensor] = []

        def call(*args: Any, **kw: Any) -> Any:
            # Pack hook: note the tensor, keep it as it is; unpack hook: hand it back.
            with torch.autograd.graph.saved_tensors_hooks(
                lambda t: saved.append(t) or t, lambda t: t
            ):
                out = replicas[slot](*args, **kw)
            for t in _tensors(out):
                rows[slot].add("outputs", t)
            for t in saved:  # after outputs: a saved output counts as output
                rows[slot].add("activations", t)
            saved.clear()
            return out

        return call

    counted_replicas = [counted(i) for i in range(len(used))]
    outputs = model.parallel_apply(counted_replicas, scattered, scattered_kwargs)
    gathered = model.gather(outputs, model.output_device)
    out_slot = next((i for i, d in enumerate(used) if d == model.output_device), 0)
    for t in _tensors(gathered):
        rows[out_slot].add("outputs", t)

    for slot, replica in enumerate(replicas):
        for t in _tensor_attrs(replica):
            if t.requires_grad:

                def hook(g: torch.Tensor, slot: int = slot) -> None:
                    with lock:
                        replica_grads[slot].append(_nbytes(g))

                t.register_hook(hook)
    loss = loss_fn(gathered)
    if loss.requires_grad:
        loss.backward()
    for slot, sizes in enumerate(replica_grads):
        rows[slot].grads += sum(sizes)
    for p in model.module.parameters():
        if p.grad is not None:  # the summed gradient, on the main device
            rows[0].grads += _nbytes(p.grad)
    return rows


def _tensor_attrs(replica: torch.nn.Module) -> list[torch.Tensor]:
    """A replica's parameter and buffer tensors, each once (parameters are plain attributes
    after replicate, buffers are still in the buffer table)."""
    found: dict[int, torch.Tensor] = {}
    for m in replica.modules():
        for key, value in vars(m).items():
            if isinstance(value, torch.Tensor) and not key.startswith("_"):
                found.setdefault(id(value), value)
        for b in m.buffers(recurse=False):
            found.setdefault(id(b), b)
    return list(found.values())
