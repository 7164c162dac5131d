"""Exercise on ZeRO-1 (lesson 19), checked against torch's ZeroRedundancyOptimizer + DDP.

``zero1_step``: after ``loss.backward()`` (each rank its own data), average the gradients,
let the local optimizer step the parameters this rank owns, and broadcast every
parameter from its owner. The reference trains a copy through torch DDP +
``torch.distributed.optim.ZeroRedundancyOptimizer`` (SGD with momentum) on the same data,
on real rank processes (both want a full ProcessGroup); the owners are torch's rule
(``minidp.zero.partition.partition_parameters``, the same owners — ``tests/test_zero.py``).

float64, as in ``ddp_grads.py``: from 3 ranks on the learner's per-parameter all-reduce
adds in another order than torch's buckets, which float64 keeps below 1e-15 relative.

Test: ``pytest tests/test_exercises.py -k zero1``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.exercise.ddp_grads import (
    CASES,
    DIVIDED_TWICE_HINT,
    ON_RANK_PROCESSES,
    _data,
    _loss,
    _model,
    warm_ddp,
)
from minidp.exercise.spec import Exercise, Mistake, Result, everywhere, same
from minidp.zero.partition import partition_parameters

LR, MOMENTUM, STEPS = 0.1, 0.9, 2


def warm_zero(rank: int, world_size: int) -> None:
    """``Exercise.prepare``: torch DDP's first use, and ``torch.distributed.optim``'s import
    (it compiles functional optimizers: seconds) — paid before the case clock runs."""
    from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401

    warm_ddp(rank, world_size)


def _params(model: nn.Module) -> list:
    return [p.detach().clone() for p in model.parameters()]


def _run_zero1(fn, case, rank, world, group) -> Result:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    theirs, mine = _model(case), _model(case)
    ddp = nn.parallel.DistributedDataParallel(theirs, process_group=group)
    opts = dict(lr=LR, momentum=MOMENTUM)
    zero = ZeroRedundancyOptimizer(ddp.parameters(), torch.optim.SGD, process_group=group, **opts)
    params = list(mine.parameters())
    shares = partition_parameters([{"params": params}], world)
    owner = {p: r for r in range(world) for p in shares[r][0]["params"]}
    local = torch.optim.SGD(shares[rank][0]["params"] or [torch.zeros(0)], **opts)
    start, first = _params(mine), {}
    for step in range(STEPS):
        batch = _data(case, rank, step)
        zero.zero_grad()
        _loss(ddp, batch).backward()
        zero.step()
        mine.zero_grad()  # every .grad: the local optimizer only knows its own share
        _loss(mine, batch).backward()
        fn(mine, local, [owner[p] for p in params], group)
        if step == 0:
            first = {"got": _params(mine), "expected": _params(theirs)}
    extra = {"start": start, "first": first, "owners": [owner[p] for p in params]}
    return Result(_params(mine), _params(theirs), extra=extra)


def _moved(first: dict, start: list, key: str) -> list:
    return [after - before for after, before in zip(first[key], start)]


def _not_divided(case, results, factor: float | None = None) -> bool:
    """First step: every move is ``factor`` (default world) x torch's (SGD's first step is
    linear in the gradient)."""
    w = case["world"]
    factor = w if factor is None else factor
    return w > 1 and everywhere(
        results,
        lambda rank, r: all(
            torch.allclose(g, e * factor, rtol=1e-9, atol=1e-12)
            for g, e in zip(
                _moved(r.extra["first"], r.extra["start"], "got"),
                _moved(r.extra["first"], r.extra["start"], "expected"),
            )  # fmt: skip
        ),
    )


def _no_broadcast(case, results) -> bool:
    """Each rank moved only its own parameters: the others are still where they started."""
    return case["world"] > 1 and everywhere(
        results,
        lambda rank, r: all(
            same(g, s)
            for g, s, o in zip(r.extra["first"]["got"], r.extra["start"], r.extra["owners"])
            if o != rank
        ),
    )


ZERO1_STEP = Exercise(
    name="zero1_step",
    lesson="19_zero1",
    summary="ZeRO-1's step: average the grads, step what you own, broadcast from each owner",
    reference="torch DDP + torch.distributed.optim.ZeroRedundancyOptimizer (SGD momentum), "
    "float64, rtol 1e-12",
    run_rank=_run_zero1,
    cases=CASES,
    **{**ON_RANK_PROCESSES, "prepare": warm_zero},
    mistakes=(
        Mistake(
            "no broadcast from the owners",
            "each rank stepped only its own parameters and kept the others' old values: after "
            "the step, broadcast(p, group=group, group_src=owners[i]) every parameter from the "
            "rank that owns it.",
            _no_broadcast,
        ),
        Mistake(
            "forgot to divide by the world size",
            "the first step moved every parameter world_size times as far as torch's: the "
            "all-reduce SUMS — divide each gradient by group.size() (DDP averages).",
            _not_divided,
        ),
        Mistake(
            "divided twice",
            DIVIDED_TWICE_HINT,
            lambda case, results: _not_divided(case, results, 1 / case["world"]),
        ),
    ),
)
