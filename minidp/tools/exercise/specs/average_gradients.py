"""``average_gradients`` (lesson 10): every .grad becomes its average, vs torch DDP's
gradients on the same model and data (``ddp.py``), on rank processes."""

from torch import nn

from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs import ddp
from minidp.tools.exercise.specs.comm import least_all_reduce


def learn(fn, case, rank, world, group):
    mine = ddp.model(case)
    ddp.loss(mine, ddp.data(case, rank)).backward()  # plain: this rank's gradients only
    fn(mine, group)
    return ddp.grads(mine)


def expect(case, rank, world, group):
    wrapped = nn.parallel.DistributedDataParallel(theirs := ddp.model(case), process_group=group)
    ddp.loss(wrapped, ddp.data(case, rank)).backward()  # torch averages inside backward
    return Expected(ddp.grads(theirs), ddp.names(theirs))


EXERCISE = Exercise(
    reference="torch.nn.parallel.DistributedDataParallel's gradients (gloo), float64, rtol 1e-12",
    learn=learn, expect=expect, cases=ddp.CASES, draw=ddp.draw, generated=4,
    tolerance=lambda case: ddp.TOL, reference_processes=True, prepare=ddp.warm,
    answers=ddp.DDP_ANSWERS, traffic=Traffic(least_all_reduce(ddp.MLP_GRAD_ELEMENTS),
                                             "an all-reduce of every float64 gradient"),
)  # fmt: skip
