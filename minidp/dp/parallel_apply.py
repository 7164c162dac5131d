"""parallel_apply: run replica ``i`` on chunk ``i``, one thread per replica.

Test: ``pytest tests/test_dp_parallel_apply.py``

Threads, not processes: torch's kernels release the GIL, so on GPUs the threads mostly
launch kernels. A thread does not inherit grad mode, autocast (thread-local in torch) or,
on CUDA, the current device and stream, so each gets the caller's. A replica's exception
is re-raised in the caller, same type, naming the replica and device, with its traceback
(the lowest failing index wins). Threads share torch's global RNG, so dropout is not
reproducible run to run.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import torch

from minidp.dp.devices import DeviceLike, as_device


class _Verbatim(str):
    """A message whose ``repr`` is itself (``KeyError`` would print the traceback's ``\\n``)."""

    def __repr__(self) -> str:
        return str(self)


class ReplicaFailure:
    """An exception caught in a replica's thread, kept as text (no frames held alive)."""

    def __init__(self, replica: int, device: str, exc: BaseException) -> None:
        self.exc_type = type(exc)
        self.where = f"in replica {replica} on device {device}"
        self.text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def reraise(self) -> None:
        """Raise the same exception type here, with the replica's traceback in the message."""
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.text}"
        if issubclass(self.exc_type, KeyError):
            msg = _Verbatim(msg)
        try:
            exc = self.exc_type(msg)
        except Exception:  # a type whose constructor wants other arguments
            raise RuntimeError(msg) from None
        raise exc from None


def _find_tensor(obj: Any) -> torch.Tensor | None:
    """The first tensor inside ``obj`` (depth first), to learn its device."""
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, dict):
        obj = list(obj.values())
    for item in obj if isinstance(obj, list | tuple) else ():
        found = _find_tensor(item)
        if found is not None:
            return found
    return None


def _thread_state(devices: Sequence[torch.device]) -> Callable[[int], ExitStack]:
    """The caller's grad mode, autocast and CUDA streams, as ``enter(i)`` for thread ``i``."""
    grad_enabled = torch.is_grad_enabled()
    autocast = {
        kind: (torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind))
        for kind in ("cpu", "cuda")
        if kind == "cpu" or torch.cuda.is_available()
    }
    streams = [torch.cuda.current_stream(d) if d.type == "cuda" else None for d in devices]

    def enter(i: int) -> ExitStack:
        stack = ExitStack()
        stack.enter_context(torch.set_grad_enabled(grad_enabled))
        for kind, (enabled, dtype) in autocast.items():
            stack.enter_context(torch.autocast(kind, enabled=enabled, dtype=dtype))
        if streams[i] is not None:
            stack.enter_context(torch.cuda.device(devices[i]))
            stack.enter_context(torch.cuda.stream(streams[i]))
        return stack

    return enter


def parallel_apply(
    modules: Sequence[Callable[..., Any]],
    inputs: Sequence[Any],
    kwargs_tup: Sequence[dict[str, Any]] | None = None,
    devices: Sequence[DeviceLike] | None = None,
) -> list[Any]:
    """Call ``modules[i](*inputs[i], **kwargs_tup[i])`` on one thread each; outputs in order.
    ``inputs[i]`` may be a single argument; ``devices`` default to each first input tensor's."""
    n = len(modules)
    kwargs_tup = [{} for _ in range(n)] if kwargs_tup is None else kwargs_tup
    if devices is None:
        found = [_find_tensor(x) for x in inputs]
        for i, t in enumerate(found):
            if t is None:
                raise ValueError(
                    f"parallel_apply: expected a tensor in the inputs of replica {i} to learn "
                    f"its device but got {type(inputs[i]).__name__} with none — pass devices="
                )
        devices = [t.device for t in found]
    for name, seq in (("inputs", inputs), ("kwargs_tup", kwargs_tup), ("devices", devices)):
        if len(seq) != n:
            raise ValueError(
                f"parallel_apply: expected one entry of {name} per module ({n}) but got "
                f"{len(seq)} — scatter the inputs to as many devices as there are replicas"
            )
    devices = [as_device(d) for d in devices]
    enter = _thread_state(devices)
    results: list[Any] = [None] * n

    def worker(i: int) -> None:
        args = inputs[i] if isinstance(inputs[i], list | tuple) else (inputs[i],)
        try:
            with enter(i):
                results[i] = modules[i](*args, **kwargs_tup[i])
        except Exception as exc:  # carried to the caller, re-raised below
            results[i] = ReplicaFailure(i, str(devices[i]), exc)

    if n == 1:
        worker(0)  # no thread for a single replica
    else:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for r in results:
        if isinstance(r, ReplicaFailure):
            r.reraise()
    return results
