"""Exercises on DDP's gradients (lessons 10, 11, 13), checked against torch DDP itself.

The learner's side runs on thread ranks in the sandbox (its tools are minidp's
collectives); torch's side on real rank processes in the judge's reference worker (torch
DDP wants a full ProcessGroup). Each builds the same float64 model from the case: the
judge trains its copy through ``torch.nn.parallel.DistributedDataParallel``, the sandbox
hands its copy to the learner's function, on the same per-rank data. float64 because
from 3 ranks on torch's bucket layout decides the summation order: the learner's order
may differ, which float64 keeps below 1e-15 relative — the tolerance (rtol 1e-12) is
honest and far tighter than any classic mistake (a factor of W, a missing all-reduce).
With 2 ranks every order is exact.

* ``average_gradients``: after ``loss.backward()``, replace every ``.grad`` by its average.
* ``bucketed_ddp``: in ``ddp_buckets.py``, on the same models and data.
* ``no_sync_accumulation``: in ``ddp_no_sync.py``, on the same models and data.

Test: ``pytest tests/test_exercises_dp_ddp.py -k "average or bucketed"``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.tools.exercise.comm_common import least_all_reduce
from minidp.tools.exercise.spec import (
    Answer,
    Exercise,
    Expected,
    Mistake,
    Traffic,
    everywhere,
    same,
)

TOL = (1e-12, 1e-15)  # float64; only the summation order may differ (see above)
CASES = (  # world 2 first: the mistakes show from 2 ranks on, and one world starts
    {"world": 2, "seed": 0},
    {"world": 3, "seed": 1},
    {"world": 1, "seed": 2},
)


def ddp_cases(**more):
    """Hypothesis strategy: world 1..3, batch rows 1..8,
    any seed, plus the exercise's own keys (``more``: name -> strategy)."""
    from hypothesis import strategies as st

    keys = {"world": st.integers(1, 3), "seed": st.integers(0, 99), "rows": st.integers(1, 8)}
    return st.fixed_dictionaries({**keys, **more})


def _st():
    from hypothesis import strategies

    return strategies


def warm_ddp(rank: int, world_size: int) -> None:
    """``Exercise.prepare``: the first torch DDP (and optimizer) in a process imports
    ``torch._dynamo`` — seconds, paid before the case clock runs."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


# What every exercise here shares: torch's side on rank processes (torch DDP), the float64
# tolerance, a warm-up before anything is forked, no shrinking (the cases are small), and
# a few generated cases (each runs torch DDP in the reference worker).
ON_RANK_PROCESSES = dict(
    tolerance=lambda case: TOL,
    reference_processes=True,
    shrink=lambda case: iter(()),
    prepare=warm_ddp,
    generated=6,
)
DDP_ANSWERS = (
    "minidp.ddp.simple",
    "minidp.textbook.ddp",
    "minidp.ddp.buckets",
    "minidp.ddp.distributed.DistributedDataParallel",
)
MLP_GRAD_ELEMENTS = 147  # 5*8+8 + 8*8+8 + 8*3+3: what one all-reduce of every gradient moves


class Branchy(nn.Module):
    """5 -> 3 like the MLP, but as real models are: the first parameter registered is used
    LAST in forward (so its gradient is ready first, not last), a layer is used twice, and
    a frozen layer (requires_grad=False) sits at the end. Parameters in registration
    order: head (8 -> 3), embed (5 -> 8), mid (8 -> 8, used twice), frozen (3 -> 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 3)
        self.embed = nn.Linear(5, 8)
        self.mid = nn.Linear(8, 8)
        self.frozen = nn.Linear(3, 3).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (rows, 5) -> (rows, 3)
        h = torch.tanh(self.embed(x))
        h = torch.tanh(self.mid(h))
        h = torch.tanh(self.mid(h))  # reused: its gradient is ready after both uses
        return self.frozen(self.head(h))


def _model(case) -> nn.Module:
    """float64 MLP 5 -> 8 -> 8 -> 3 (or ``Branchy`` when ``case["model"] == "branchy"``),
    the same on every rank (explicit generator)."""
    g = torch.Generator().manual_seed(500 + case["seed"])
    if case.get("model") == "branchy":
        model = Branchy()
    else:
        model = nn.Sequential(
            nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3)
        )
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model.double()


def _data(case, rank: int, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(case["seed"] * 7919 + rank * 101 + step)
    rows = case.get("rows", 6)  # this rank's batch
    return (torch.randn(rows, 5, generator=g, dtype=torch.float64),
            torch.randn(rows, 3, generator=g, dtype=torch.float64))  # fmt: skip


def _loss(model, batch) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def _grads(model: nn.Module) -> list:
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def _scaled(got: list, expected: list, factor: float) -> bool:
    """Every gradient is ``factor`` times torch's (a frozen parameter's None stays None)."""
    return all(
        (g is None and e is None)
        or (
            isinstance(g, torch.Tensor)
            and isinstance(e, torch.Tensor)
            and torch.allclose(g, e * factor, rtol=1e-9, atol=1e-12)
        )
        for g, e in zip(got, expected)
    )


# ----------------------------------------------------------------------------- after backward


def _learn_average(fn, case, rank, world, group) -> Answer:
    mine = _model(case)
    _loss(mine, _data(case, rank)).backward()  # plain: this rank's gradients only
    fn(mine, group)
    return Answer(_grads(mine))


def _expect_average(case, rank, world, group) -> Expected:
    theirs, local = _model(case), _model(case)
    ddp = nn.parallel.DistributedDataParallel(theirs, process_group=group)
    _loss(ddp, _data(case, rank)).backward()  # torch averages inside backward
    _loss(local, _data(case, rank)).backward()
    return Expected(_grads(theirs), {"local": _grads(local)})


DIVIDED_TWICE_HINT = (
    "every gradient is torch's divided by world_size once more: divide by group.size() "
    "ONCE — before the sum (torch's order) or after it, not both (and not op='avg' plus "
    "a division)."
)
DIVIDED_TWICE = Mistake(
    "divided twice",
    DIVIDED_TWICE_HINT,
    lambda case, results: (
        case["world"] > 1
        and everywhere(results, lambda rank, r: _scaled(r.got, r.expected, 1 / case["world"]))
    ),
)

NOT_DIVIDED = Mistake(
    "forgot to divide by the world size",
    "every gradient is world_size times torch's: the all-reduce SUMS — divide by "
    "group.size() (torch multiplies each gradient by 1/world_size before the sum).",
    lambda case, results: (
        case["world"] > 1
        and everywhere(results, lambda rank, r: _scaled(r.got, r.expected, case["world"]))
    ),
)

AVERAGE_GRADIENTS = Exercise(
    name="average_gradients",
    lesson="10_ddp_from_scratch",
    summary="DDP's job after backward: every .grad becomes its average over the ranks",
    reference="torch.nn.parallel.DistributedDataParallel's gradients (gloo), float64, rtol 1e-12",
    learn=_learn_average,
    expect=_expect_average,
    cases=CASES,
    strategy=ddp_cases,
    **ON_RANK_PROCESSES,
    answers=DDP_ANSWERS,
    traffic=Traffic(
        bounds=least_all_reduce(MLP_GRAD_ELEMENTS),
        formula="an all-reduce of every float64 gradient, (W-1)/W of them out of each rank",
    ),
    mistakes=(
        NOT_DIVIDED,
        DIVIDED_TWICE,
        Mistake(
            "gradients unchanged",
            "every rank kept its own gradients: the all-reduce ran on a copy (torch.cat, "
            ".clone(), .reshape of a non-contiguous tensor) and the result never went back "
            "into p.grad — copy it back (p.grad.copy_(...)) or reduce p.grad itself.",
            lambda case, results: (
                case["world"] > 1
                and everywhere(results, lambda rank, r: same(r.got, r.extra["local"]))
            ),
        ),
    ),
)
