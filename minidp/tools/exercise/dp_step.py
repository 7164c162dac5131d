"""Exercise ``data_parallel_step`` (lesson 3): one whole DataParallel step.

The learner's devices are ``["cpu"] * n`` — simulated devices, on every machine — and the
model and batch are float64 on the CPU. Every device choice of the reference is explicit:

* always, the **CPU reference**: the plain module's forward and backward on the whole
  batch — what ``torch.nn.DataParallel`` computes on a machine without an accelerator
  (its ``forward`` is ``self.module(*inputs)`` when it has no device ids). It does not
  call the wrapper: with CUDA present the wrapper would move the model to ``cuda:0``;
* where CUDA exists (:func:`gpu_plan`, decided by the judge and written into every case
  as ``cuda=K``), also **torch's real GPU DataParallel** on all K GPUs: a copy of the
  model moved to ``cuda:0``, ``nn.DataParallel(copy, device_ids=[0..K-1])``, the batch on
  ``cuda:0``; its output, loss and gradients (back on the CPU) are compared with the
  learner's too.

The learner's per-chunk sums round differently from the full-batch ones (and the GPU's
from the CPU's): float64 keeps that below 1e-13 relative, and the tolerance (rtol 1e-10)
is far tighter than any classic mistake. Cases and batches are ``dp_split.py``'s.

Test: ``pytest tests/test_exercises_dp_ddp.py -k data_parallel``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.tools.exercise.dp_split import CASES, _any_rank, _batch, dp_cases, shrink_dp
from minidp.tools.exercise.spec import Answer, Exercise, Expected, Mistake, Result


def gpu_plan(cuda_available: bool, cuda_count: int) -> dict:
    """What every case adds about the machine: ``{"cuda": K}`` where torch's real GPU
    DataParallel runs beside the CPU reference (K = every GPU there is; one GPU:
    DataParallel on ``cuda:0`` alone), ``{}`` without CUDA."""
    return {"cuda": int(cuda_count)} if cuda_available and cuda_count > 0 else {}


def machine_plan() -> dict:
    """:func:`gpu_plan` for this machine (asked in the judge: the zygote never touches CUDA)."""
    return gpu_plan(torch.cuda.is_available(), torch.cuda.device_count())


def _mlp(case) -> nn.Module:
    """A small float64 MLP, the same for every rank of the case."""
    g = torch.Generator().manual_seed(10_000 + case.get("seed", 0))
    model = nn.Sequential(nn.Linear(case["shape"][1], 8), nn.Tanh(), nn.Linear(8, 3)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / p.shape[-1] ** 0.5)
            if case.get("accumulate"):  # a gradient from an earlier micro-batch
                p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64)
    return model


def _rows_seen(model: nn.Module) -> list[int]:
    """A list that fills with the rows of every forward of ``model`` — or of any replica:
    ``copy.deepcopy`` and torch's ``replicate`` both keep the hook (a function is copied
    as itself), so what each device received is recorded, whatever order they ran in."""
    seen: list[int] = []
    model.register_forward_pre_hook(lambda module, args: seen.append(len(args[0])))
    return seen


def _per_replica_grads(model: nn.Module, x, y, devices: int) -> list[list[torch.Tensor]]:
    """Replica i's share of the batch gradient: the whole batch's loss, with every chunk
    but i's output held constant. (A slip that counts replica i twice adds this once more.)"""
    outs = [model(c) for c in x.chunk(devices)]
    shares = []
    for i in range(len(outs)):
        joined = torch.cat([o if j == i else o.detach() for j, o in enumerate(outs)])
        loss = nn.functional.cross_entropy(joined, y)
        shares.append(list(torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)))
    return shares


def _plain(x):
    return x.detach() if isinstance(x, torch.Tensor) else x


def _grads(model: nn.Module) -> list:
    return [None if p.grad is None else p.grad.detach().to("cpu") for p in model.parameters()]


def _learn_dp_step(fn, case, rank, world, group) -> Answer:
    x, y = _batch(case, rank)
    mine = _mlp(case)  # float64 on the CPU (and an earlier .grad, if accumulating)
    seen = _rows_seen(mine)
    answer = fn(mine, x.double(), y, nn.functional.cross_entropy, ["cpu"] * case["devices"])
    out, loss = answer if isinstance(answer, (tuple, list)) and len(answer) == 2 else (answer, None)
    got = [_plain(out), _plain(loss), sorted(seen, reverse=True), *_grads(mine)]
    if case.get("cuda"):  # the same answer, compared with torch's GPU DataParallel too
        got += [_plain(out), _plain(loss), *_grads(mine)]
    return Answer(got)


def _gpu_data_parallel(case, x, y) -> list:
    """torch's real DataParallel on ``case["cuda"]`` GPUs: output, loss, gradients (on CPU)."""
    model = _mlp(case).to("cuda:0")  # Module.to moves an earlier .grad too
    official = nn.DataParallel(model, device_ids=list(range(case["cuda"])))
    out = official(x.to("cuda:0"))
    loss = nn.functional.cross_entropy(out, y.to("cuda:0"))
    loss.backward()
    return [out.detach().to("cpu"), loss.detach().to("cpu"), *_grads(model)]


def _expect_dp_step(case, rank, world, group) -> Expected:
    x, y = _batch(case, rank)
    x = x.double()
    model = _mlp(case)
    out = model(x)  # torch's DataParallel without an accelerator: the plain module (see above)
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    chunks = list(zip(x.chunk(case["devices"]), y.chunk(case["devices"])))
    per_chunk = [nn.functional.cross_entropy(model(xc), yc) for xc, yc in chunks]
    rows = sorted([len(xc) for xc, _ in chunks], reverse=True)  # torch's scatter: chunk()
    names = [f"{n}'s gradient" for n, _ in model.named_parameters()]
    labels = ["output", "loss", "rows each device received", *names]
    expected = [out.detach(), loss.detach(), rows, *_grads(model)]
    if case.get("cuda"):
        expected += _gpu_data_parallel(case, x, y)
        gpu = f"torch's DataParallel on {case['cuda']} GPU(s)"
        labels += [f"output vs {gpu}", f"loss vs {gpu}", *[f"{n} vs {gpu}" for n in names]]
    extra = {
        "input": x,
        "used": len(chunks),
        "before": [p.grad for p in _mlp(case).parameters()],  # None unless accumulating
        "mean_of_means": torch.stack(per_chunk).mean().detach(),
        "shares": _per_replica_grads(_mlp(case), x, y, case["devices"]),
        "even rows": sorted([len(c) for c in x.tensor_split(case["devices"])], reverse=True),
        "labels": labels,
    }
    return Expected(expected, extra)


def _close(a, b) -> bool:
    return isinstance(a, torch.Tensor) and torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def _grads_scaled(case, r: Result) -> bool:
    """Gradients (beyond any earlier one) are 1/used of torch's: averaged, not summed."""
    n = r.extra["used"]
    before = r.extra["before"]
    pairs = zip(r.got[3:], r.expected[3:], before)
    return n > 1 and all(
        _close(g, (e - (b if b is not None else 0)) / n + (b if b is not None else 0))
        for g, e, b in pairs
    )


def _overwrote(case, r: Result) -> bool:
    """The earlier .grad is gone: the step's sum replaced it instead of adding to it."""
    before = r.extra["before"]
    return before[0] is not None and all(
        _close(g, e - b) for g, e, b in zip(r.got[3:], r.expected[3:], before)
    )


def _replica_twice(case, r: Result) -> bool:
    """The gradients are torch's plus one replica's share once more."""
    return any(
        all(_close(g, e + s) for g, e, s in zip(r.got[3:], r.expected[3:], share))
        for share in r.extra["shares"]
    )


DATA_PARALLEL_STEP = Exercise(
    name="data_parallel_step",
    lesson="03_data_parallel",
    summary="one DataParallel step: scatter, replicate, threads, gather, summed gradients",
    reference="torch.nn.DataParallel: on CPU its plain-module forward/backward, and where "
    "CUDA exists also the real wrapper on the GPUs; float64, rtol 1e-10",
    learn=_learn_dp_step,
    expect=_expect_dp_step,
    plan=machine_plan,
    answers=(
        "minidp.textbook.dp",
        "minidp.dp.replicate",
        "minidp.dp.parallel_apply",
        "minidp.dp.scatter",
        "minidp.dp.gather",
        "minidp.dp.data_parallel.DataParallel",
        "torch.nn.parallel.data_parallel",
        "torch.nn.parallel.data_parallel.DataParallel",
        "torch.nn.parallel.replicate",
        "torch.nn.parallel.parallel_apply",
        "torch.nn.parallel.scatter_gather",
    ),
    cases=tuple(
        {**{k: v for k, v in c.items() if k != "dtype"}, "accumulate": i == 3}
        for i, c in enumerate(CASES)
    ),
    strategy=lambda: dp_cases().map(
        lambda c: {**c, "dtype": "float64", "accumulate": c["seed"] % 3 == 0}
    ),
    shrink=shrink_dp,
    tolerance=lambda case: (1e-10, 1e-12),
    mistakes=(
        Mistake(
            "even split instead of chunk",
            "the devices received as-even-as-possible chunks (tensor_split: batch 10 on 4 "
            "devices is 3, 3, 2, 2), but torch's scatter uses inputs.chunk(n): ceil(B/n) "
            "rows each and the rest on the last (3, 3, 3, 1). The gradient sums hide it; "
            "what each device computes does not.",
            _any_rank(lambda case, r: r.got[2] == r.extra["even rows"] != r.expected[2]),
        ),
        Mistake(
            "mean of per-device losses",
            "the loss is the mean of per-device means; with unequal chunks (3, 3, 3, 1) that "
            "over-weights the small chunk. Gather the outputs first, then compute ONE loss "
            "on the whole batch.",
            _any_rank(
                lambda case, r: (
                    not _close(r.got[1], r.expected[1])
                    and _close(r.got[1], r.extra["mean_of_means"])
                )
            ),
        ),
        Mistake(
            "a replica counted twice",
            "the gradients are torch's plus one replica's gradient once more: sum each "
            "replica's gradient exactly once — start from the first replica's and add the "
            "OTHERS (for c in copies[1:]), or start from zero and add them all.",
            _any_rank(_replica_twice),
        ),
        Mistake(
            "gradients averaged over replicas",
            "DataParallel SUMS the replicas' gradients on the main device: each replica's "
            "gradient is already a share of the whole batch's loss. Do not divide by the "
            "number of devices.",
            _any_rank(_grads_scaled),
        ),
        Mistake(
            "overwrote the earlier .grad",
            "model's .grad already held a gradient (an earlier micro-batch) and your step "
            "replaced it: add the summed gradient to it (p.grad += total, or p.grad = total "
            "when p.grad is None), as backward does.",
            _any_rank(_overwrote),
        ),
    ),
)
