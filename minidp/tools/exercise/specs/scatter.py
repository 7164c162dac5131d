"""``scatter`` (lesson 2) vs ``torch.nn.parallel.scatter``'s code on CPU; inputs unchanged."""

import torch.nn.parallel.scatter_gather as torch_sg

from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs import dp

LABELS = ["one tuple of arguments per device", "the inputs after the call (unchanged)"]


def learn(fn, case, rank, world, group):
    x, y = dp.batch(case, rank)
    return [fn((x, y, "train"), ["cpu"] * case["devices"]), [x, y]]  # simulated devices


def expect(case, rank, world, group):
    x, y = dp.batch(case, rank)
    with dp.torch_scatter_gather_on_cpu():  # two batched tensors and a plain object
        scattered = torch_sg.scatter((x, y, "train"), list(range(case["devices"])))
    return Expected([[list(a) for a in scattered], list(dp.batch(case, rank))], LABELS)


EXERCISE = Exercise(
    reference="torch.nn.parallel.scatter (its code; Scatter = Tensor.chunk on CPU), torch.equal",
    learn=learn, expect=expect, cases=dp.CASES, draw=dp.draw,
    answers=("minidp.dp.scatter", "minidp.textbook.dp", "torch.nn.parallel.scatter_gather"),
)  # fmt: skip
