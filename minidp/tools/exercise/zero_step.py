"""Exercise on ZeRO-1 (lesson 19), checked against torch's ZeroRedundancyOptimizer + DDP.

``zero1_step``: after ``loss.backward()`` (each rank its own data), average the gradients,
let the local optimizer step the parameters this rank owns, and broadcast every
parameter from its owner. The reference trains a copy through torch DDP +
``torch.distributed.optim.ZeroRedundancyOptimizer`` (SGD with momentum) on the same data,
on real rank processes in the judge's reference worker (both want a full ProcessGroup).
The learner's side runs on thread ranks in the sandbox (its tools are minidp's
``all_reduce`` and ``broadcast``), with the owners given by torch's rule as
``zero1_partition.py`` ports it (``_greedy``, held equal to torch's partition there): if
the port and torch ever disagreed, the reference solution would fail here.

float64, as in ``ddp_grads.py``: from 3 ranks on the learner's per-parameter all-reduce
adds in another order than torch's buckets, which float64 keeps below 1e-15 relative.

Test: ``pytest tests/test_exercises.py -k zero1``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.tools.exercise.comm_common import least_all_reduce
from minidp.tools.exercise.ddp_grads import (
    CASES,
    DDP_ANSWERS,
    DIVIDED_TWICE_HINT,
    MLP_GRAD_ELEMENTS,
    ON_RANK_PROCESSES,
    _data,
    _loss,
    _model,
)
from minidp.tools.exercise.inputs import world_and_seed
from minidp.tools.exercise.partition_rule import _greedy, _torch_owners
from minidp.tools.exercise.spec import (
    Answer,
    Exercise,
    Expected,
    Mistake,
    Traffic,
    everywhere,
    same,
)
from minidp.tools.exercise.zero1_partition import ZERO_ANSWERS, warm_zero

LR, MOMENTUM, STEPS = 0.1, 0.9, 2


def _params(model: nn.Module) -> list:
    return [p.detach().clone() for p in model.parameters()]


def _learn_zero1(fn, case, rank, world, group) -> Answer:
    mine = _model(case)
    params = list(mine.parameters())
    owners = _greedy([[p.numel() for p in params]], world)[0]  # torch's rule (the port)
    mine_only = [p for p, owner in zip(params, owners) if owner == rank]
    local = torch.optim.SGD(mine_only or [torch.zeros(0)], lr=LR, momentum=MOMENTUM)
    first = []
    for step in range(STEPS):
        mine.zero_grad()  # every .grad: the local optimizer only knows its own share
        _loss(mine, _data(case, rank, step)).backward()
        fn(mine, local, owners, group)
        if step == 0:
            first = _params(mine)
    return Answer(_params(mine), {"first": first})


def _expect_zero1(case, rank, world, group) -> Expected:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    theirs = _model(case)
    ddp = nn.parallel.DistributedDataParallel(theirs, process_group=group)
    zero = ZeroRedundancyOptimizer(
        ddp.parameters(), torch.optim.SGD, process_group=group, lr=LR, momentum=MOMENTUM
    )
    start, first = _params(theirs), []
    for step in range(STEPS):
        zero.zero_grad()
        _loss(ddp, _data(case, rank, step)).backward()
        zero.step()
        if step == 0:
            first = _params(theirs)
    owners = _torch_owners(zero, [list(theirs.parameters())], group)[0]
    return Expected(_params(theirs), {"start": start, "first expected": first, "owners": owners})


def _moved(after: list, start: list) -> list:
    return [a - b for a, b in zip(after, start)]


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
                _moved(r.extra["first"], r.extra["start"]),
                _moved(r.extra["first expected"], r.extra["start"]),
            )  # fmt: skip
        ),
    )


def _no_broadcast(case, results) -> bool:
    """Each rank moved only its own parameters: the others are still where they started."""
    return case["world"] > 1 and everywhere(
        results,
        lambda rank, r: all(
            same(g, s)
            for g, s, o in zip(r.extra["first"], r.extra["start"], r.extra["owners"])
            if o != rank
        ),
    )


ZERO1_STEP = Exercise(
    name="zero1_step",
    lesson="19_zero1",
    summary="ZeRO-1's step: average the grads, step what you own, broadcast from each owner",
    reference="torch DDP + torch.distributed.optim.ZeroRedundancyOptimizer (SGD momentum), "
    "float64, rtol 1e-12",
    learn=_learn_zero1,
    expect=_expect_zero1,
    cases=CASES,
    strategy=lambda: world_and_seed(1, 3),
    **{**ON_RANK_PROCESSES, "prepare": warm_zero},
    answers=(*DDP_ANSWERS, *ZERO_ANSWERS),
    traffic=Traffic(
        bounds=least_all_reduce(MLP_GRAD_ELEMENTS),
        formula="an all-reduce of every float64 gradient, (W-1)/W of them out of each rank",
    ),
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
