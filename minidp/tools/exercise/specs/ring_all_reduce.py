"""``ring_all_reduce`` (lesson 8) vs gloo's all_reduce, ``torch.equal``, in place; each rank
sends the ring's bytes."""

import math

from minidp.tools.exercise import reference
from minidp.tools.exercise.inputs import nbytes, values
from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs.comm import CASES, COLLECTIVES, draw


def learn(fn, case, rank, world, group):
    return [mine := values(case, rank), fn(mine, group)]


def expect(case, rank, world, group):
    total = reference.all_reduce(values(case, rank), group)
    return Expected([total, total], ["tensor after the call (in place)", "what you returned"])


def ring_bytes(case, world: int) -> list[tuple[int, int]]:
    """2(W-1) chunks of floor(N/W) or ceil(N/W) elements from every rank."""
    n, steps = math.prod(case["shape"]), 2 * (world - 1)
    return [(steps * nbytes(case, n // world), steps * nbytes(case, -(-n // world)))] * world


EXERCISE = Exercise(
    reference="torch.distributed.all_reduce (gloo), torch.equal", learn=learn, expect=expect,
    cases=CASES, draw=draw, answers=COLLECTIVES,
    traffic=Traffic(ring_bytes, "the ring's, 2(W-1) chunks of N/W elements"))  # fmt: skip
