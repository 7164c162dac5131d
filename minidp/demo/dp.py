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
(on a CPU-only machine that is the plain module on the full batch, which rounds
differently, so the check there is ``assert_close`` and the max difference is printed).

Colour: on when stdout is a terminal and NO_COLOR is unset (``--color always|never``).

Test: ``pytest tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import operator
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


@dataclasses.dataclass
class StepRecord:
    """What one DP step produced, stage by stage (recorded first, printed afterwards)."""

    labels: list[str]  # one per device, "(main)" on device 0
    rows: list[tuple[int, int, str]]  # per used device: first row, last row, chunk shape
    replicas: list[tuple[str, bool, str]]  # per replica: 0.weight shape, shares storage?, grad_fn
    elements: int  # parameter elements copied per other device
    tensors: int  # parameter tensors per replica
    threads: list[str]  # the thread that ran each replica
    outputs: list[torch.Tensor]  # per replica
    out: torch.Tensor  # gathered on the main device
    loss: float
    replica_grads: list[torch.Tensor]  # d loss / d replica[i][0].weight
    grads: list[torch.Tensor]  # the model's .grad after backward


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


def render_step(rec: StepRecord, x: torch.Tensor, p: Paint) -> list[str]:
    """The recorded step as lines, stage by stage."""
    n, used = len(rec.labels), len(rec.rows)
    width = max(len(label) for label in rec.labels)
    lab = [f"{label:<{width}}" for label in rec.labels]
    lines = [p.head(f"1. scatter: x {shape(x)} -> x.chunk({n}, dim=0), one chunk per device")]
    lines += [f"   {lab[i]}  x[rows {a}..{b}]  {s}" for i, (a, b, s) in enumerate(rec.rows)]
    if used < n:
        lines.append(p.dim(f"   chunk rounds up: only {used} of {n} devices get rows"))
    lines += ["", p.head(f"2. replicate: the model -> {used} replicas (a new set every step)")]
    for i, (s, shares, kind) in enumerate(rec.replicas):
        how = "shares the model's storage" if shares else "a copy"
        lines.append(f"   {lab[i]}  0.weight {s}: {how}, grad_fn={kind}")
    lines.append(
        p.dim(
            f"   {rec.elements} parameter elements ({rec.tensors} tensors) copied to "
            f"{used - 1} other device(s); buffers detached"
        )
    )
    lines += ["", p.head("3. parallel_apply: one thread per replica, replica i on chunk i")]
    for i, o in enumerate(rec.outputs):
        lines.append(f"   {lab[i]}  {rec.threads[i]:<12} out {shape(o)}  out[0] = {_row(o)}")
    lines += ["", p.head("4. gather: outputs -> torch.cat(dim=0) on the main device")]
    lines.append(f"   out {shape(rec.out)}  = the model's output for the whole batch")
    lines += ["", p.head("5. backward: loss = mse(out, y); loss.backward()")]
    lines.append(f"   loss = {rec.loss:.6f}; gather's backward cuts d loss/d out back into chunks")
    for i, g in enumerate(rec.replica_grads):
        lines.append(f"   {lab[i]}  d loss/d 0.weight {shape(g)}  sum={_num(g)}")
    terms = " + ".join(f"g{i}" for i in range(used))
    lines.append(f"   Broadcast backward on the main device: {terms} (in device order)")
    lines.append(
        f"   -> model[0].weight.grad sum={_num(rec.grads[0])}  (the one real model gets it)"
    )
    return lines


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


def render_update(rec: UpdateRecord, labels: list[str], p: Paint) -> list[str]:
    width = max(len(label) for label in labels)
    lines = [p.head(f"6. optimizer step: SGD(lr={rec.lr}) on the main device's model only")]
    lines.append(
        f"   model[0].weight[0, 0]: {rec.before:+.6f} -> {rec.after:+.6f}  (w -= lr * grad; "
        "the replicas are gone, nothing else to update)"
    )
    lines += ["", p.head("7. next step: replicate again, from the updated model")]
    for i, v in enumerate(rec.replicas_after):
        lines.append(f"   {labels[i]:<{width}}  0.weight[0, 0] = {v:+.6f}")
    lines.append(
        f"   every replica holds the updated weights: {p.verdict(rec.fresh, str(rec.fresh))}"
        " — DP pays this copy every step; DDP's ranks keep their own replica and step it"
    )
    return lines


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
    print(p.head("8. parity checks (the step above, before the optimizer step)"))
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

    step = record_step(model, x, y, devices)
    print("\n".join(render_step(step, x, p)))
    print()
    update = record_update(model, devices, len(step.rows))
    print("\n".join(render_update(update, step.labels, p)))
    ok = parity(model0, x, y, len(devices), step.out, step.grads, p) and update.fresh

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
