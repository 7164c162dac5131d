"""Exercise ``data_parallel_step`` (lesson 3): one whole DataParallel step.

The reference is ``torch.nn.DataParallel`` on the same float64 model and batch. Without an
accelerator torch's wrapper is the plain module, so the per-chunk sums round differently
from its full-batch ones: float64 keeps that below 1e-13 relative, and the tolerance (rtol
1e-10) is far tighter than any classic mistake. Cases and batches are ``dp_split.py``'s.

Test: ``pytest tests/test_exercises_dp_ddp.py -k data_parallel``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.exercise.dp_split import CASES, _any_rank, _batch, dp_cases, shrink_dp
from minidp.exercise.spec import Exercise, Mistake, Result


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


def _run_dp_step(fn, case, rank, world, group) -> Result:
    x, y = _batch(case, rank)
    x = x.double()
    model, mine = _mlp(case), _mlp(case)  # same weights (and earlier .grad, if any)
    official = nn.DataParallel(model)  # no accelerator: device_ids == [], the plain module
    out = official(x)
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    got_out, got_loss = fn(mine, x.clone(), y.clone(), nn.functional.cross_entropy,
                           ["cpu"] * case["devices"])  # fmt: skip
    chunks = list(zip(x.chunk(case["devices"]), y.chunk(case["devices"])))
    per_chunk = [nn.functional.cross_entropy(model(xc), yc) for xc, yc in chunks]
    extra = {
        "input": x,
        "used": len(chunks),
        "before": [p.grad for p in _mlp(case).parameters()],  # None unless accumulating
        "mean_of_means": torch.stack(per_chunk).mean().detach(),
    }
    got = [got_out.detach(), got_loss.detach(), *[p.grad for p in mine.parameters()]]
    expected = [out.detach(), loss.detach(), *[p.grad for p in model.parameters()]]
    return Result(got, expected, extra)


def _close(a, b) -> bool:
    return isinstance(a, torch.Tensor) and torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def _grads_scaled(case, r: Result) -> bool:
    """Gradients (beyond any earlier one) are 1/used of torch's: averaged, not summed."""
    n = r.extra["used"]
    before = r.extra["before"]
    pairs = zip(r.got[2:], r.expected[2:], before)
    return n > 1 and all(
        _close(g, (e - (b if b is not None else 0)) / n + (b if b is not None else 0))
        for g, e, b in pairs
    )


def _overwrote(case, r: Result) -> bool:
    """The earlier .grad is gone: the step's sum replaced it instead of adding to it."""
    before = r.extra["before"]
    return before[0] is not None and all(
        _close(g, e - b) for g, e, b in zip(r.got[2:], r.expected[2:], before)
    )


DATA_PARALLEL_STEP = Exercise(
    name="data_parallel_step",
    lesson="03_data_parallel",
    summary="one DataParallel step: scatter, replicate, threads, gather, summed gradients",
    reference="torch.nn.DataParallel (CPU: the plain module), float64, rtol 1e-10",
    run_rank=_run_dp_step,
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
            "mean of per-device losses",
            "the loss is the mean of per-device means; with unequal chunks (3, 3, 3, 1) that "
            "over-weights the small chunk. Gather the outputs first, then compute ONE loss "
            "on the whole batch.",
            _any_rank(lambda case, r: _close(r.got[1], r.extra["mean_of_means"])),
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
