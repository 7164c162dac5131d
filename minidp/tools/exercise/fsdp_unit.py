"""Exercise (lesson 21): one FSDP unit's forward and backward, from this rank's shards.

The learner gets the module (its parameters hold zeros: only their shapes count), this
rank's dim-0 shard of every parameter (``torch.chunk`` rows, unpadded — possibly empty),
its input and the gradient of the loss with respect to the unit's output. They all-gather
the full parameters, run the forward and the backward, and reduce-scatter the gradients:
the answer is the output and this rank's rows of every averaged gradient.

The torch component: ``torch.nn.parallel.DistributedDataParallel`` on the full module
(same weights, same per-rank input and output gradient) — FSDP's output is the plain
forward, and its gradient shard is this rank's ``torch.chunk`` of the DDP-averaged
gradient (what FSDP2's ``fully_shard`` gives too: ``tests/test_fsdp.py``). float64,
rtol 1e-12: from 3 ranks on the learner's reduce-scatter adds in another order than
DDP's all-reduce; classic mistakes (a factor of W, padding rows left in) are far larger.

The learner's side runs on thread ranks in the sandbox (its tools are minidp's
``all_gather`` and ``reduce_scatter``); torch DDP in the judge's reference worker.

Test: ``pytest tests/test_exercises.py -k fsdp_unit``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.tools.exercise.ddp_grads import DIVIDED_TWICE_HINT, warm_ddp
from minidp.tools.exercise.inputs import world_and_seed
from minidp.tools.exercise.spec import (
    Answer,
    Exercise,
    Expected,
    Mistake,
    Result,
    Traffic,
    everywhere,
)

TOL = (1e-12, 1e-15)  # float64; only the summation order may differ (see above)
CASES = (
    {"world": 2, "seed": 0},
    {"world": 3, "seed": 1},  # 5 rows on 3 ranks: 2, 2, 1; 2 rows: 1, 1, 0 (an empty shard)
    {"world": 1, "seed": 2},
    {"world": 4, "seed": 3},
)


def _module(case) -> nn.Module:
    """float64 unit: Linear 3 -> 5, Tanh, Linear 5 -> 2; the same weights on every rank."""
    g = torch.Generator().manual_seed(700 + case["seed"])
    unit = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()
    with torch.no_grad():
        for p in unit.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return unit


def _chunk(t: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    chunks = t.chunk(world)
    return chunks[rank].clone() if rank < len(chunks) else t.new_empty((0, *t.shape[1:]))


def _inputs(case, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(case["seed"] * 7919 + rank * 101)
    x = torch.randn(4, 3, generator=g, dtype=torch.float64)  # this rank's input
    return x, torch.randn(4, 2, generator=g, dtype=torch.float64)  # and d loss / d output


def _learn(fn, case, rank, world, group) -> Answer:
    x, grad_out = _inputs(case, rank)
    full = _module(case)
    names = [n for n, _ in full.named_parameters()]
    shards = {n: _chunk(p.detach(), world, rank) for n, p in full.named_parameters()}
    empty = _module(case)
    with torch.no_grad():
        for p in empty.parameters():
            p.zero_()  # the learner must gather the weights, not read them here
    answer = fn(empty, shards, x, grad_out, group)
    got = answer
    if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], dict):
        got_out = answer[0].detach() if isinstance(answer[0], torch.Tensor) else answer[0]
        got = [got_out] + [answer[1].get(n) for n in names]
    return Answer(got)


def _expect(case, rank, world, group) -> Expected:
    x, grad_out = _inputs(case, rank)
    full = _module(case)
    ddp = nn.parallel.DistributedDataParallel(full, process_group=group)
    out = ddp(x)
    out.backward(grad_out)  # averaged over the ranks inside backward
    names = [n for n, _ in full.named_parameters()]
    # compared as [output, grad shard of each parameter in module order]
    expected = [out.detach()] + [_chunk(p.grad, world, rank) for p in full.parameters()]
    full_grads = {n: p.grad for n, p in full.named_parameters()}
    return Expected(expected, {"full_grads": full_grads, "names": names})


def _least(case, world: int) -> list[tuple[int, None]]:
    """Every rank's rows of every parameter must reach the others: (W-1) x its floor share."""
    rows_cols = [(5, 3), (5, 1), (2, 5), (2, 1)]  # the unit's weights and biases
    least = sum((world - 1) * (rows // world) * cols * 8 for rows, cols in rows_cols)
    return [(least, None)] * world


def _grads(result: Result) -> dict:
    """{name: the learner's gradient shard} (empty if the answer had the wrong form)."""
    got, names = result.got, result.extra["names"]
    if not isinstance(got, list) or len(got) != len(names) + 1:
        return {}
    return {n: g for n, g in zip(names, got[1:]) if isinstance(g, torch.Tensor)}


def _expected(result: Result) -> dict:
    return dict(zip(result.extra["names"], result.expected[1:]))


def _scaled(result: Result, factor: float) -> bool:
    got, expected = _grads(result), _expected(result)
    return got.keys() == expected.keys() and all(
        isinstance(got[n], torch.Tensor)
        and got[n].shape == expected[n].shape
        and torch.allclose(got[n], expected[n] * factor, rtol=1e-9, atol=1e-12)
        for n in got
    )


def _padded(result: Result) -> bool:
    got, expected = _grads(result), _expected(result)
    return any(
        isinstance(got.get(n), torch.Tensor) and got[n].shape[0] > e.shape[0]
        for n, e in expected.items()
    )


def _full(result: Result) -> bool:
    got, full = _grads(result), result.extra["full_grads"]
    return bool(got) and all(
        isinstance(got.get(n), torch.Tensor) and got[n].shape == f.shape for n, f in full.items()
    )


FSDP_UNIT = Exercise(
    name="fsdp_unit",
    lesson="21_fsdp",
    summary="one FSDP unit: all-gather the shards, forward, backward, reduce-scatter the grads",
    reference="torch.nn.parallel.DistributedDataParallel's output and this rank's torch.chunk "
    "of its averaged gradients (gloo), float64, rtol 1e-12",
    learn=_learn,
    expect=_expect,
    reference_processes=True,
    answers=("minidp.textbook.fsdp.FSDP",),
    traffic=Traffic(bounds=_least, formula="the all-gather of every rank's rows"),
    cases=CASES,
    strategy=lambda: world_and_seed(1, 4),
    generated=4,
    tolerance=lambda case: TOL,
    shrink=lambda case: iter(()),  # the cases are already small; each try costs a world
    prepare=warm_ddp,
    mistakes=(
        Mistake(
            "forgot to average",
            "every gradient shard is world_size times torch's: the reduce-scatter SUMS — "
            'use op="avg" (or divide by group.size()).',
            lambda case, results: (
                case["world"] > 1
                and everywhere(results, lambda r, res: _scaled(res, case["world"]))
            ),
        ),
        Mistake(
            "divided twice",
            DIVIDED_TWICE_HINT,
            lambda case, results: (
                case["world"] > 1
                and everywhere(results, lambda r, res: _scaled(res, 1 / case["world"]))
            ),
        ),
        Mistake(
            "returned the full gradients",
            "each rank returned every row of every gradient: FSDP keeps only this rank's "
            "rows — reduce-scatter, and return your own chunk (the shape of your shard).",
            lambda case, results: (
                case["world"] > 1 and everywhere(results, lambda r, res: _full(res))
            ),
        ),
        Mistake(
            "padding rows left in",
            "a gradient shard has more rows than your parameter shard: you padded every "
            "chunk to ceil(rows / world) rows for the collective — cut the padding off "
            "again (keep as many rows as the shard you were given).",
            lambda case, results: any(_padded(res) for res in results),
        ),
    ),
)
