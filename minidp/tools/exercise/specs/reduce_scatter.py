"""``reduce_scatter`` (lesson 8) vs gloo's reduce_scatter, ``torch.equal``; ``output`` starts as
77s, ``input_list`` comes back unchanged, each rank sends W-1 pieces."""

import torch

from minidp.tools.exercise import reference
from minidp.tools.exercise.inputs import nbytes, values
from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs.comm import CASES, COLLECTIVES, draw, exactly


def learn(fn, case, rank, world, group):
    inputs = [values(case, rank, salt=c) for c in range(world)]
    fn(output := torch.full_like(inputs[0], 77), inputs, group)  # 77: no answer holds one
    return [output, inputs]


def expect(case, rank, world, group):
    inputs = [values(case, rank, salt=c) for c in range(world)]
    out = reference.reduce_scatter([t.clone() for t in inputs], group)
    return Expected([out, inputs], ["output", "input_list after the call (unchanged)"])


PIECES = Traffic(exactly(lambda case, world, rank: (world - 1) * nbytes(case)),
                 "the ring's, W-1 pieces of N elements")  # fmt: skip
EXERCISE = Exercise(
    reference="torch.distributed.reduce_scatter (gloo; before torch 2.8 one all_reduce per "
    "input), torch.equal", learn=learn, expect=expect, cases=CASES, draw=draw,
    answers=COLLECTIVES, traffic=PIECES)  # fmt: skip
