"""Record one ``DataParallel`` step for real: scatter, replicate, parallel_apply, gather, backward.

    python -m minidp demo dp                 # these events, printed
    python -m minidp diagrams --only dp      # drawn

minidp.dp's four functions (what ``minidp.DataParallel.forward`` chains) on the devices
given (simulated: ``"cpu"`` repeated, a thread each), then backward. One event per stage
per device, timed around the call (parallel_apply: each replica's forward on its thread;
backward: from the gradient reaching the replica's output to its last parameter's), with
what the device then held: input rows, its replica's first weight (the model's storage?
its ``grad_fn``), its output and thread, its last bias gradient; ``sum grads``: their sum
in the model's ``.grad``.

Test: ``pytest tests/test_classroom.py tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import threading

import torch
from torch import nn

from minidp import trace
from minidp.dp import gather, parallel_apply, replicate, scatter
from minidp.tools.recorder import LANE

STAGES = ("scatter", "replicate", "parallel_apply", "gather", "backward", "sum grads")


def _vals(t: torch.Tensor) -> list:
    return t.detach().tolist()


def dp_events(model: nn.Sequential, x, y, devices: list, loss_fn=nn.functional.mse_loss) -> list:
    """One DP step of ``model`` (its ``.grad`` left summed) on ``devices``; one event per stage
    per device (``pid``: the device's index)."""
    events: list[dict] = []

    def emit(stage: str, dev: int, t0: float, t1: float, **args) -> None:
        events.append({"name": f"dp {stage}", "ph": "X", "ts": t0, "dur": max(t1 - t0, 0.001),
                       "pid": dev, "tid": LANE, "args": {"stage": stage, **args}})  # fmt: skip

    now = trace.now_us
    t0 = now()
    chunks = scatter(x, devices)  # chunk rounds up: maybe fewer chunks than devices
    t1 = now()
    row = 0
    for i, c in enumerate(chunks):
        emit("scatter", i, t0, t1, rows=[row, row + len(c) - 1], input=_vals(c))
        row += len(c)
    used = devices[: len(chunks)]
    t0 = now()
    replicas = replicate(model, used)  # a new set every step: replica 0 IS the model
    t1 = now()
    for i, r in enumerate(replicas):
        w = r[0].weight
        emit("replicate", i, t0, t1, weight=_vals(w), grad_fn=type(w.grad_fn).__name__,
             shares_storage=w.data_ptr() == model[0].weight.data_ptr())  # fmt: skip
    ran: dict[int, tuple] = {}

    def timed(i: int):
        def run(xc):
            start = now()
            out = replicas[i](xc)
            ran[i] = (start, now(), threading.current_thread().name)  # this device's thread
            return out

        return run

    outs = parallel_apply([timed(i) for i in range(len(used))], [(c,) for c in chunks],
                          devices=used)  # fmt: skip
    for i, o in enumerate(outs):
        emit("parallel_apply", i, *ran[i][:2], output=_vals(o), thread=ran[i][2])
    t0 = now()
    out = gather(outs, used[0])
    emit("gather", 0, t0, now(), output=_vals(out))
    first: dict[int, float] = {}  # the gradient reaches replica i's output
    last: dict[int, float] = {}  # ... and its last parameter
    grads: dict[int, torch.Tensor] = {}
    done: list[float] = []  # the model's .grad accumulated (replicate's Broadcast summed them)
    for i, (o, r) in enumerate(zip(outs, replicas)):
        o.register_hook(lambda g, i=i: first.setdefault(i, now()) and None)
        r[-1].bias.register_hook(lambda g, i=i: grads.__setitem__(i, g))
        for m in r.modules():
            for t in (vars(m).get("weight"), vars(m).get("bias")):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(lambda g, i=i: last.__setitem__(i, now()))
    hooks = [p.register_post_accumulate_grad_hook(lambda p: done.append(now()))
             for p in model.parameters()]  # fmt: skip
    loss = loss_fn(out, y)
    loss.backward()
    for h in hooks:  # the caller's model keeps no hook of ours
        h.remove()
    for i in range(len(replicas)):
        emit("backward", i, first[i], last[i], grad=_vals(grads[i]), loss=loss.item())
    emit("sum grads", 0, max(last.values()), max(done), grad=_vals(model[-1].bias.grad))
    return events
