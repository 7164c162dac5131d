"""``zero1_step`` (lesson 19) vs torch DDP + ``ZeroRedundancyOptimizer`` (SGD momentum):
the parameters after each of two steps, float64."""

import torch
from torch import nn

from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs import ddp
from minidp.tools.exercise.specs.comm import least_all_reduce
from minidp.tools.exercise.specs.zero1_partition import ZERO_ANSWERS, warm_zero

LR, MOMENTUM = 0.1, 0.9


def owners(numels: list[int], world: int) -> list[int]:
    """torch's rule, one group: largest first, to the rank with the fewest elements."""
    totals, out = [0] * world, [0] * len(numels)
    for i in sorted(range(len(numels)), key=lambda i: numels[i], reverse=True):
        out[i] = totals.index(min(totals))
        totals[out[i]] += numels[i]
    return out


def learn(fn, case, rank, world, group):
    mine = ddp.model(case)
    params = list(mine.parameters())
    owned = owners([p.numel() for p in params], world)
    mine_only = [p for p, o in zip(params, owned) if o == rank] or [torch.zeros(0)]
    local, got = torch.optim.SGD(mine_only, lr=LR, momentum=MOMENTUM), []
    for step in range(2):
        mine.zero_grad()  # every .grad: the local optimizer only knows its own share
        ddp.loss(mine, ddp.data(case, rank, step)).backward()
        fn(mine, local, owned, group)
        got += [p.detach().clone() for p in params]
    return got


def expect(case, rank, world, group):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    theirs = ddp.model(case)
    wrapped = nn.parallel.DistributedDataParallel(theirs, process_group=group)
    zero = ZeroRedundancyOptimizer(wrapped.parameters(), torch.optim.SGD, process_group=group,
                                   lr=LR, momentum=MOMENTUM)  # fmt: skip
    expected, labels = [], []
    for step in range(2):
        zero.zero_grad()
        ddp.loss(wrapped, ddp.data(case, rank, step)).backward()
        zero.step()
        expected += [p.detach().clone() for p in theirs.parameters()]
        labels += [f"step {step + 1}: {n}" for n in ddp.names(theirs, "value")]
    return Expected(expected, labels)


EXERCISE = Exercise(
    reference="torch DDP + torch.distributed.optim.ZeroRedundancyOptimizer (SGD momentum), "
    "float64, rtol 1e-12", learn=learn, expect=expect, cases=ddp.CASES, draw=ddp.draw,
    generated=4, tolerance=lambda case: ddp.TOL, reference_processes=True, prepare=warm_zero,
    answers=(*ddp.DDP_ANSWERS, *ZERO_ANSWERS), traffic=Traffic(
        least_all_reduce(ddp.MLP_GRAD_ELEMENTS), "an all-reduce of every float64 gradient"),
)  # fmt: skip
