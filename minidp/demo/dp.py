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

It ends with the parity checks: the step equals the per-chunk definition of DP
(``torch.equal`` on outputs and gradients), and it is close to ``torch.nn.DataParallel``
(on a CPU-only machine that is the plain module on the full batch, which rounds
differently, so the check there is ``assert_close`` and the max difference is printed).

Colour: on when stdout is a terminal and NO_COLOR is unset (``--color always|never``).

Test: ``pytest tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import threading

import torch
from torch import nn

from minidp.dp import gather, memory_report, parallel_apply, replicate, scatter_kwargs
from minidp.dp.data_parallel import DataParallel
from minidp.dp.devices import slot_label


class Paint:
    """Bold / dim / green / red via ANSI codes, or plain text when colour is off."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.on else text

    def head(self, text: str) -> str:
        return self("1;36", text)

    def dim(self, text: str) -> str:
        return self("2", text)

    def verdict(self, ok: bool, text: str) -> str:
        return self("1;32" if ok else "1;31", text)


def shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def make_model_and_data(batch: int, seed: int = 0):
    """A 6 -> 16 -> 3 MLP (no dropout: the replica threads share one RNG) and a batch."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    g = torch.Generator().manual_seed(seed + 1)
    return model, torch.randn(batch, 6, generator=g), torch.randn(batch, 3, generator=g)


def run_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, devices: list, p: Paint):
    """One DP step through the four functions, printing each stage; returns (out, grads)."""
    n = len(devices)
    label = lambda i: slot_label(devices, i) + (" (main)" if i == 0 else "")  # noqa: E731
    width = max(len(label(i)) for i in range(n))

    print(p.head(f"1. scatter: x {shape(x)} -> x.chunk({n}, dim=0), one chunk per device"))
    inputs, kwargs = scatter_kwargs((x,), {}, devices)
    start = 0
    for i, (chunk,) in enumerate(inputs):
        rows = f"rows {start}..{start + len(chunk) - 1}"
        print(f"   {label(i):<{width}}  x[{rows}]  {shape(chunk)}")
        start += len(chunk)
    used = devices[: len(inputs)]
    if len(used) < n:
        print(p.dim(f"   chunk rounds up: only {len(used)} of {n} devices get rows"))

    print()
    print(p.head(f"2. replicate: the model -> {len(used)} replicas (a new set every step)"))
    replicas = replicate(model, used)
    w = model[0].weight
    for i, r in enumerate(replicas):
        rw = r[0].weight
        how = "shares the model's storage" if rw.data_ptr() == w.data_ptr() else "a copy"
        kind = type(rw.grad_fn).__name__
        print(f"   {label(i):<{width}}  0.weight {shape(rw)}: {how}, grad_fn={kind}")
    count = sum(t.numel() for t in model.parameters())
    others = len(used) - 1
    print(p.dim(f"   {count} parameters copied to {others} other device(s); buffers detached"))

    print()
    print(p.head("3. parallel_apply: one thread per replica, replica i on chunk i"))
    threads: dict[int, str] = {}

    def tagged(i: int):
        def call(*args):
            threads[i] = threading.current_thread().name
            return replicas[i](*args)

        return call

    outputs = parallel_apply([tagged(i) for i in range(len(used))], inputs, kwargs, used)
    for i, o in enumerate(outputs):
        print(f"   {label(i):<{width}}  {threads[i]:<12} out {shape(o)}  out[0] = {_row(o)}")

    print()
    print(p.head(f"4. gather: outputs -> torch.cat(dim=0) on {devices[0]} (main)"))
    out = gather(outputs, devices[0])
    print(f"   out {shape(out)}  = the model's output for the whole batch")

    print()
    print(p.head("5. backward: loss = mse(out, y); loss.backward()"))
    seen: dict[int, torch.Tensor] = {}
    for i, r in enumerate(replicas):
        r[0].weight.register_hook(lambda g, i=i: seen.__setitem__(i, g))
    loss = nn.functional.mse_loss(out, y)
    loss.backward()
    print(f"   loss = {loss.item():.6f}; gather's backward cuts d loss/d out back into chunks")
    for i in range(len(used)):
        print(f"   {label(i):<{width}}  d loss/d 0.weight {shape(seen[i])}  sum={_num(seen[i])}")
    terms = " + ".join(f"g{i}" for i in range(len(used)))
    print(f"   Broadcast backward on the main device: {terms} (in device order)")
    print(f"   -> model[0].weight.grad sum={_num(w.grad)}  (the one real model gets it)")
    return out, [prm.grad.clone() for prm in model.parameters()]


def _describe(m: nn.Module) -> str:
    if isinstance(m, nn.Linear):
        return f"Linear({m.in_features}->{m.out_features})"
    return type(m).__name__


def _row(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:+.3f}" for v in t[0].tolist()) + "]"


def _num(t: torch.Tensor) -> str:
    return f"{t.sum().item():+.6f}"


def parity(model0: nn.Module, x, y, n: int, out, grads, p: Paint) -> bool:
    """Compare the step with the per-chunk definition and with torch.nn.DataParallel."""
    print()
    print(p.head("6. parity checks"))
    # (a) the definition: each chunk on the plain model, outputs concatenated, grads summed
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
    official = nn.DataParallel(twin)
    where = "GPUs" if official.device_ids else "no GPU: it is the plain module, full batch"
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

    out, grads = run_step(model, x, y, devices, p)
    ok = parity(model0, x, y, len(devices), out, grads, p)

    print()
    print(p.head("7. where the bytes are (one step, counted per device)"))
    report = memory_report(
        DataParallel(copy.deepcopy(model0), devices),
        x,
        loss_fn=lambda o: nn.functional.mse_loss(o, y),
    )
    print("   " + str(report).replace("\n", "\n   "))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
