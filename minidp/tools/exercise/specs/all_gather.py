"""``all_gather`` (lesson 9) vs gloo's all_gather, ``torch.equal``: the entries start as 77s,
``tensor`` comes back unchanged, each rank sends W-1 tensors."""

import torch

from minidp.tools.exercise import reference
from minidp.tools.exercise.inputs import values
from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs.comm import CASES, COLLECTIVES, draw
from minidp.tools.exercise.specs.reduce_scatter import PIECES


def learn(fn, case, rank, world, group):
    mine = values(case, rank)
    fn(tensor_list := [torch.full_like(mine, 77) for _ in range(world)], mine, group)
    return [tensor_list, mine]


def expect(case, rank, world, group):
    mine = values(case, rank)
    labels = ["tensor_list", "your tensor after the call (unchanged)"]
    return Expected([reference.all_gather(mine, group), mine], labels)


EXERCISE = Exercise(reference="torch.distributed.all_gather (gloo), torch.equal", learn=learn,
                    expect=expect, cases=CASES, draw=draw, answers=COLLECTIVES,
                    traffic=PIECES)  # fmt: skip
