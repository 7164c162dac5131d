"""``ring_pass`` (lesson 6): the right neighbour's tensor; yours unchanged; one message."""

from minidp.tools.exercise import reference
from minidp.tools.exercise.inputs import nbytes, values
from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs.comm import CASES, COLLECTIVES, draw, exactly


def learn(fn, case, rank, world, group):
    return [fn(mine := values(case, rank), group), mine]


def expect(case, rank, world, group):
    every = reference.all_gather(values(case, rank), group)
    labels = ["what you returned (rank+1's tensor)", "your tensor after the call (unchanged)"]
    return Expected([every[(rank + 1) % world], every[rank]], labels)


ONE = Traffic(exactly(lambda case, world, rank: nbytes(case)), "one tensor, left")
EXERCISE = Exercise(
    reference="the right neighbour's tensor from torch.distributed.all_gather (gloo), torch.equal",
    learn=learn, expect=expect, cases=CASES, draw=draw, answers=COLLECTIVES,
    traffic=ONE)  # fmt: skip
