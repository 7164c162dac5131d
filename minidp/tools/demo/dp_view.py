"""Terminal drawing of a recorded DataParallel step: the stages, the update.

    python -m minidp demo dp --devices 3 --batch 7

Pure text from the recorder's events (``minidp.tools.recorder.dp``) and the update
``dp.py`` records: nothing here runs a model.

Test: ``pytest tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.tools.demo.style import Style


def shape(t) -> str:
    return "(" + ", ".join(str(s) for s in torch.as_tensor(t).shape) + ")"


def render_step(events: list[dict], model: nn.Module, x, labels: list[str], p: Style) -> list[str]:
    """The recorded step as lines, stage by stage (``labels``: one per device asked for)."""

    def stage(name: str) -> list[dict]:  # per device, in device order
        return [e["args"] for e in sorted(events, key=lambda e: e["pid"]) if e["name"] == name]

    n, rows = len(labels), stage("dp scatter")
    used, width = len(rows), max(len(label) for label in labels)
    lab = [f"{label:<{width}}" for label in labels]
    lines = [p.head(f"1. scatter: x {shape(x)} -> x.chunk({n}, dim=0), one chunk per device")]
    lines += [f"   {lab[i]}  x[rows {a['rows'][0]}..{a['rows'][1]}]  {shape(a['input'])}"
              for i, a in enumerate(rows)]  # fmt: skip
    if used < n:
        lines.append(p.dim(f"   chunk rounds up: only {used} of {n} devices get rows"))
    lines += ["", p.head(f"2. replicate: the model -> {used} replicas (a new set every step)")]
    for i, a in enumerate(stage("dp replicate")):
        how = "shares the model's storage" if a["shares_storage"] else "a copy"
        lines.append(f"   {lab[i]}  0.weight {shape(a['weight'])}: {how}, grad_fn={a['grad_fn']}")
    params = list(model.parameters())
    lines.append(
        p.dim(
            f"   {sum(t.numel() for t in params)} parameter elements ({len(params)} tensors) "
            f"copied to {used - 1} other device(s); buffers detached"
        )
    )
    lines += ["", p.head("3. parallel_apply: one thread per replica, replica i on chunk i")]
    for i, a in enumerate(stage("dp parallel_apply")):
        out = torch.tensor(a["output"])
        lines.append(f"   {lab[i]}  {a['thread']:<12} out {shape(out)}  out[0] = {_row(out)}")
    lines += ["", p.head("4. gather: outputs -> torch.cat(dim=0) on the main device")]
    lines.append(f"   out {shape(stage('dp gather')[0]['output'])}  = the model's output for "
                 "the whole batch")  # fmt: skip
    backward = stage("dp backward")
    last = f"{len(model) - 1}.bias"
    lines += ["", p.head("5. backward: loss = mse(out, y); loss.backward()")]
    lines.append(f"   loss = {backward[0]['loss']:.6f}; gather's backward cuts d loss/d out back "
                 "into chunks")  # fmt: skip
    for i, a in enumerate(backward):
        lines.append(f"   {lab[i]}  d loss/d {last} {shape(a['grad'])}  sum={_num(a['grad'])}")
    terms = " + ".join(f"g{i}" for i in range(used))
    lines.append(f"   Broadcast backward on the main device: {terms} (in device order)")
    summed = stage("dp sum grads")[0]["grad"]
    lines.append(f"   -> model[{len(model) - 1}].bias.grad sum={_num(summed)}  (the one real "
                 "model gets it)")  # fmt: skip
    return lines


def render_update(rec, labels: list[str], p: Style) -> list[str]:
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


def _num(values: list) -> str:
    return f"{torch.tensor(values).sum().item():+.6f}"
