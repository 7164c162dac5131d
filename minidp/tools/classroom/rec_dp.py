"""Record one ``DataParallel`` step for real: scatter, replicate, parallel_apply, gather.

    python -m minidp classroom --no-serve --only dp --out /tmp/cls

The step calls minidp.dp's four functions one after the other (exactly what
``minidp.DataParallel.forward`` chains) on simulated devices (``"cpu"`` repeated, one thread
each), then backward. Each stage becomes one event per device on the ``classroom`` lane,
timed by a real span around the call and carrying the tensors that device held after it:
its input rows, its replica's first layer (and whether it shares the model's storage),
its output, its replica's gradient, and finally the summed gradient on the main device.

The model is tiny on purpose (3 -> 4 -> 2) so every value fits on a projector.
Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp import trace
from minidp.dp import gather, parallel_apply, replicate, scatter

LANE = "classroom"
STAGES = ("scatter", "replicate", "parallel_apply", "gather", "backward", "sum grads")


def _vals(t: torch.Tensor) -> list:
    return t.detach().tolist()


def dp_events(devices: int, batch: int) -> list[dict]:
    """One DP step on ``devices`` simulated devices; one event per stage per device."""
    if devices < 1:
        raise ValueError(f"classroom dp: --devices must be at least 1, got {devices}")
    if batch < devices:
        raise ValueError(
            f"classroom dp: --batch ({batch}) must be at least --devices ({devices}) so every "
            "device gets rows"
        )
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, 3, generator=g), torch.randn(batch, 2, generator=g)
    where = ["cpu"] * devices
    events: list[dict] = []

    def emit(stage: str, dev: int, t0: float, t1: float, **args) -> None:
        events.append(
            {"name": f"dp {stage}", "ph": "X", "ts": t0, "dur": max(t1 - t0, 0.001),
             "pid": dev, "tid": LANE, "args": {"stage": stage, **args}}
        )  # fmt: skip

    t0 = trace.now_us()
    chunks = scatter(x, where)
    t1 = trace.now_us()
    row = 0
    for i, c in enumerate(chunks):
        emit("scatter", i, t0, t1, rows=[row, row + len(c) - 1], input=_vals(c))
        row += len(c)
    t0 = trace.now_us()
    replicas = replicate(model, where)
    t1 = trace.now_us()
    w = model[0].weight
    for i, r in enumerate(replicas):
        shares = r[0].weight.data_ptr() == w.data_ptr()  # replica 0 IS the model
        emit("replicate", i, t0, t1, weight=_vals(r[0].weight), shares_storage=shares)
    spans: dict[int, tuple[float, float]] = {}

    def timed(i: int):
        def run(xc):
            start = trace.now_us()
            out = replicas[i](xc)
            spans[i] = (start, trace.now_us())  # this device's thread, its own forward
            return out

        return run

    outs = parallel_apply([timed(i) for i in range(len(chunks))], [(c,) for c in chunks],
                          devices=where[: len(chunks)])  # fmt: skip
    for i, o in enumerate(outs):
        emit("parallel_apply", i, *spans[i], output=_vals(o))
    t0 = trace.now_us()
    out = gather(outs, "cpu")
    t1 = trace.now_us()
    emit("gather", 0, t0, t1, output=_vals(out))
    grads: dict[int, torch.Tensor] = {}
    for i, r in enumerate(replicas):
        r[2].bias.register_hook(lambda gr, i=i: grads.__setitem__(i, gr))
    t0 = trace.now_us()
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    t1 = trace.now_us()
    for i in range(len(replicas)):
        emit("backward", i, t0, t1, grad=_vals(grads[i]), loss=loss.item())
    # replicate's Broadcast summed every replica's gradient into the one model's .grad
    emit("sum grads", 0, t1, trace.now_us(), grad=_vals(model[2].bias.grad))
    return events
