"""Classroom demo: one DataParallel training step, stage by stage, with real shapes.

    python -m minidp demo dp                      # 4 simulated devices, batch 8
    python -m minidp demo dp --devices 3 --batch 10
    python -m minidp demo dp --color never

The recorder (``minidp.tools.recorder.dp``: also ``dp_pipeline.png`` and the classroom's DP
scene) runs minidp's ``scatter``, ``replicate``, ``parallel_apply`` and ``gather`` (what
``minidp.DataParallel.forward`` chains), then backward; ``dp_view.py`` prints what its
events say each produced: chunk shapes, which replica shares the model's storage, which
thread ran which replica, the gathered output, every replica's gradient and their sum on
the main device. This file adds the optimizer step on the main device and the next step's
``replicate`` copying the *updated* weights again (DP's per-step cost), then the checks:
``torch.equal`` with the book's ``data_parallel_step``, and ``assert_close`` with
``torch.nn.DataParallel`` on the same devices (without GPUs torch's wrapper is the plain
module on the full batch, which rounds differently; the max difference is printed), and
the bytes per device. Devices are simulated (``"cpu"`` repeated, one thread each) or
``--gpus``: the ones asked for, never guessed from the machine. Colour: ``style.py``.

Test: ``pytest tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import operator
import sys

import torch
from torch import nn

from minidp.dp import replicate
from minidp.dp.data_parallel import DataParallel
from minidp.dp.devices import official_data_parallel, slot_label
from minidp.textbook.dp import data_parallel_step
from minidp.tools.demo.dp_view import render_step, render_update
from minidp.tools.demo.style import Style
from minidp.tools.planner.dp_memory import memory_report
from minidp.tools.recorder import mlp
from minidp.tools.recorder.dp import dp_events


def make_model_and_data(batch: int):
    """A 6 -> 16 -> 3 MLP (no dropout: the replica threads share one RNG) and a batch."""
    g = torch.Generator().manual_seed(1)
    return mlp(6, 16, 3), torch.randn(batch, 6, generator=g), torch.randn(batch, 3, generator=g)


@dataclasses.dataclass
class UpdateRecord:
    """The optimizer step on the main device, and the next step's fresh replicas."""

    lr: float
    before: float  # model[0].weight[0, 0] before the step
    after: float  # ... after it
    replicas_after: list[float]  # replica i's 0.weight[0, 0] at the next step's replicate
    fresh: bool  # every new replica holds the updated weights (torch.equal)


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


def parity(model0: nn.Module, x, y, devices: list, out, grads, p: Style) -> bool:
    """Compare the step with the per-chunk definition and with torch.nn.DataParallel."""
    print()
    print(p.head("8. parity checks (the step above, before the optimizer step)"))
    # (a) the book's step: each chunk on a copy, outputs concatenated, grads summed in order
    ref = copy.deepcopy(model0)
    ref_out, _ = data_parallel_step(ref, x, y, nn.functional.mse_loss, devices)
    ok_out = torch.equal(out, ref_out)
    ok_grad = all(torch.equal(a, b.grad) for a, b in zip(grads, ref.parameters()))
    print("   vs the book's data_parallel_step (minidp.textbook.dp): torch.cat([model(c) for c")
    print("      in x.chunk(n)]), grads = per-chunk grads summed in device order")
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
    p = Style.for_stdout(args.color)

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
    print(p.bold(f"DataParallel, one training step: {what}, batch {args.batch}"))
    layers = " -> ".join(_describe(m) for m in model)
    print(p.dim(f"model {layers} lives on {devices[0]} (the main device)"))
    print()

    events = dp_events(model, x, y, devices)
    labels = [slot_label(devices, i) + (" (main)" if i == 0 else "") for i in range(len(devices))]
    print("\n".join(render_step(events, model, x, labels, p)))
    print()
    grads = [prm.grad.clone() for prm in model.parameters()]  # the step's, before SGD uses them
    (gathered,) = [e["args"]["output"] for e in events if e["name"] == "dp gather"]
    update = record_update(model, devices, sum(e["name"] == "dp scatter" for e in events))
    print("\n".join(render_update(update, labels, p)))
    out = torch.tensor(gathered, device=devices[0])
    ok = parity(model0, x, y, devices, out, grads, p) and update.fresh

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
