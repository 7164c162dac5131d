"""Classroom demo: one DataParallel training step, stage by stage, with real shapes.

    python -m minidp demo dp                      # 4 simulated devices, batch 8
    python -m minidp demo dp --devices 3 --batch 10
    python -m minidp demo dp --color never

What happens: a small MLP and a batch are made; the demo then calls minidp's own
``scatter_kwargs``, ``replicate``, ``parallel_apply`` and ``gather`` one after the other
(exactly what ``minidp.DataParallel.forward`` chains) and prints what each produced: the
chunk shapes per device, which replica shares storage with the model, which thread ran
which replica, the gathered output; then the backward pass, with every replica's
gradient and their sum landing on the main device. Devices are simulated: ``"cpu"``
repeated, one thread each (on a GPU machine, ``--gpus`` uses the real ones).

Then the optimizer step on the main device's model, and the next step's ``replicate``
copying the *updated* weights to every device again (DP's per-step cost). It ends with
the parity checks: the step equals the per-chunk definition of DP
(``torch.equal`` on outputs and gradients), and it is close to ``torch.nn.DataParallel``
on the same devices (for simulated devices: what torch's wrapper is in a process without
GPUs, the plain module on the full batch, which rounds differently, so the check there is
``assert_close`` and the max difference is printed). The devices are the ones asked for
(``--devices`` or ``--gpus``), never guessed from what the machine has.

Colour: on when stdout is a terminal and NO_COLOR is unset (``--color always|never``).

This file runs the step and records it (``dp_run.py`` holds the records, ``dp_view.py`` draws
them).

Test: ``pytest tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import argparse
import copy
import operator
import os
import sys
import threading

import torch
from torch import nn

from minidp.dp import gather, parallel_apply, replicate, scatter_kwargs
from minidp.dp.data_parallel import DataParallel
from minidp.dp.devices import official_data_parallel, slot_label
from minidp.tools.demo.dp_run import StepRecord, UpdateRecord
from minidp.tools.demo.dp_view import Paint, render_step, render_update, shape
from minidp.tools.planner.dp_memory import memory_report


def make_model_and_data(batch: int, seed: int = 0):
    """A 6 -> 16 -> 3 MLP (no dropout: the replica threads share one RNG) and a batch."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    g = torch.Generator().manual_seed(seed + 1)
    return model, torch.randn(batch, 6, generator=g), torch.randn(batch, 3, generator=g)


def record_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, devices: list) -> StepRecord:
    """One DP step through the four functions (what DataParallel.forward chains) + backward."""
    n = len(devices)
    labels = [slot_label(devices, i) + (" (main)" if i == 0 else "") for i in range(n)]
    inputs, kwargs = scatter_kwargs((x,), {}, devices)  # ((chunk,), ...) one per used device
    used = devices[: len(inputs)]
    starts = [0]
    for (chunk,) in inputs:
        starts.append(starts[-1] + len(chunk))
    rows = [(starts[i], starts[i + 1] - 1, shape(c)) for i, (c,) in enumerate(inputs)]
    replicas = replicate(model, used)  # a new set every step: replica 0 IS the model
    w = model[0].weight
    kinds = [
        (shape(r[0].weight), r[0].weight.data_ptr() == w.data_ptr(), type(r[0].weight.grad_fn))
        for r in replicas
    ]
    threads: dict[int, str] = {}

    def tagged(i: int):
        def call(*args):
            threads[i] = threading.current_thread().name
            return replicas[i](*args)

        return call

    outputs = parallel_apply([tagged(i) for i in range(len(used))], inputs, kwargs, used)
    out = gather(outputs, devices[0])
    seen: dict[int, torch.Tensor] = {}
    for i, r in enumerate(replicas):
        r[0].weight.register_hook(lambda g, i=i: seen.__setitem__(i, g))
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    return StepRecord(
        labels=labels,
        rows=rows,
        replicas=[(s, shares, kind.__name__) for s, shares, kind in kinds],
        elements=sum(t.numel() for t in model.parameters()),
        tensors=len(list(model.parameters())),
        threads=[threads[i] for i in range(len(used))],
        outputs=outputs,
        out=out,
        loss=loss.item(),
        replica_grads=[seen[i] for i in range(len(used))],
        grads=[prm.grad.clone() for prm in model.parameters()],
    )


def record_update(model: nn.Module, devices: list, used: int, lr: float = 0.1) -> UpdateRecord:
    """SGD on the one real model, then replicate again as the next step would."""
    before = model[0].weight[0, 0].item()
    torch.optim.SGD(model.parameters(), lr=lr).step()
    replicas = replicate(model, devices[:used])  # the next step copies the NEW weights
    # replicas hold plain tensors (not Parameters): look each one up by its name
    fresh = all(
        torch.equal(operator.attrgetter(name)(r), prm)
        for r in replicas
        for name, prm in model.named_parameters()
    )
    return UpdateRecord(
        lr=lr,
        before=before,
        after=model[0].weight[0, 0].item(),
        replicas_after=[r[0].weight[0, 0].item() for r in replicas],
        fresh=fresh,
    )


def _describe(m: nn.Module) -> str:
    if isinstance(m, nn.Linear):
        return f"Linear({m.in_features}->{m.out_features})"
    return type(m).__name__


def parity(model0: nn.Module, x, y, devices: list, out, grads, p: Paint) -> bool:
    """Compare the step with the per-chunk definition and with torch.nn.DataParallel."""
    print()
    print(p.head("8. parity checks (the step above, before the optimizer step)"))
    # (a) the definition: each chunk on the plain model, outputs concatenated, grads summed
    n = len(devices)
    ref = copy.deepcopy(model0)
    outs = [ref(c) for c in x.chunk(n)]
    ref_out = torch.cat(outs)
    params = list(ref.parameters())
    upstream = torch.autograd.grad(nn.functional.mse_loss(ref_out, y), outs)
    ref_grads = None
    for o, g in zip(outs, upstream):
        mine = torch.autograd.grad(o, params, g)
        ref_grads = list(mine) if ref_grads is None else [a + b for a, b in zip(ref_grads, mine)]
    ok_out = torch.equal(out, ref_out)
    ok_grad = all(torch.equal(a, b) for a, b in zip(grads, ref_grads))
    print("   vs the per-chunk definition: torch.cat([model(c) for c in x.chunk(n)]),")
    print("      grads = per-chunk grads summed in device order")
    print(f"      outputs {p.verdict(ok_out, f'torch.equal: {ok_out}')}, ", end="")
    print(f"{len(grads)} gradients {p.verdict(ok_grad, f'torch.equal: {ok_grad}')}")

    # (b) the official wrapper on the same model and data
    twin = copy.deepcopy(model0)
    official = official_data_parallel(twin, devices)
    where = (
        f"on {', '.join(map(str, devices))}"
        if official is not twin
        else "simulated devices: torch's wrapper, in a process without GPUs, is the plain "
        "module on the full batch"
    )
    t_out = official(x)
    nn.functional.mse_loss(t_out, y).backward()
    diff = max(
        (out - t_out).abs().max().item(),
        *[(a - b.grad).abs().max().item() for a, b in zip(grads, twin.parameters())],
    )
    try:
        torch.testing.assert_close(out, t_out)
        for a, b in zip(grads, twin.parameters()):
            torch.testing.assert_close(a, b.grad)
        ok_close = True
    except AssertionError:
        ok_close = False
    print(f"   vs torch.nn.DataParallel ({where}):")
    print(
        f"      outputs and gradients {p.verdict(ok_close, f'assert_close: {ok_close}')}"
        f", max |difference| = {diff:.1e}"
    )
    return ok_out and ok_grad and ok_close


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="minidp demo dp",
        description="One DataParallel training step, stage by stage, checked against torch.",
    )
    parser.add_argument("--devices", type=int, default=4, help="simulated devices (default 4)")
    parser.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    parser.add_argument("--gpus", action="store_true", help="use the real GPUs instead")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    args = parser.parse_args(argv)
    if args.devices < 1 or args.batch < 1:
        parser.error("--devices and --batch must be at least 1")
    color = {"always": True, "never": False}.get(args.color)
    if color is None:
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    p = Paint(color)

    if args.gpus:
        if torch.cuda.device_count() < 1:
            parser.error("--gpus: no CUDA device visible")
        devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
        what = f"{len(devices)} GPUs, one thread each"
    else:
        devices = [torch.device("cpu")] * args.devices
        what = f"{args.devices} simulated devices (cpu, one thread each)"
    model, x, y = make_model_and_data(args.batch)
    model, x, y = model.to(devices[0]), x.to(devices[0]), y.to(devices[0])
    model0 = copy.deepcopy(model)
    print(p("1", f"DataParallel, one training step: {what}, batch {args.batch}"))
    layers = " -> ".join(_describe(m) for m in model)
    print(p.dim(f"model {layers} lives on {devices[0]} (the main device)"))
    print()

    step = record_step(model, x, y, devices)
    print("\n".join(render_step(step, x, p)))
    print()
    update = record_update(model, devices, len(step.rows))
    print("\n".join(render_update(update, step.labels, p)))
    ok = parity(model0, x, y, devices, step.out, step.grads, p) and update.fresh

    print()
    print(p.head("9. where the bytes are (one step, counted per device)"))
    report = memory_report(
        DataParallel(copy.deepcopy(model0), devices),
        x,
        loss_fn=lambda o: nn.functional.mse_loss(o, y),
    )
    print("   " + str(report).replace("\n", "\n   "))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
