"""Terminal drawing of a recorded DataParallel step: the stages, the update, colour.

Pure text from the records in ``dp_run.py`` (filled by ``dp.py``): nothing here
runs a model. Colour through ANSI codes when asked.

    python -m minidp demo dp --devices 3 --batch 7

Test: ``pytest tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import torch

from minidp.tools.demo.dp_run import StepRecord, UpdateRecord


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


def _row(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:+.3f}" for v in t[0].tolist()) + "]"


def _num(t: torch.Tensor) -> str:
    return f"{t.sum().item():+.6f}"
