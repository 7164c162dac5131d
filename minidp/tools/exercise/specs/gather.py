"""``gather`` (lesson 2) vs ``torch.nn.parallel.gather``'s code on CPU; outputs unchanged."""

import torch.nn.parallel.scatter_gather as torch_sg

from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs import dp

LABELS = ["the gathered output", "the outputs after the call (unchanged)"]


def _outputs(case, rank: int) -> list:
    x, _ = dp.batch(case, rank)
    x = x.T.contiguous() if case.get("dim", 0) == 1 else x  # (F, B): the batch along dim 1
    return [c.clone() for c in x.chunk(case["devices"], case.get("dim", 0))]


def learn(fn, case, rank, world, group):
    outputs = _outputs(case, rank)
    return [fn(outputs, "cpu", case.get("dim", 0)), outputs]


def expect(case, rank, world, group):
    with dp.torch_scatter_gather_on_cpu():
        gathered = torch_sg.gather(_outputs(case, rank), "cpu", case.get("dim", 0))
    return Expected([gathered, _outputs(case, rank)], LABELS)


EXERCISE = Exercise(
    reference="torch.nn.parallel.gather (its own code, Gather = torch.cat on CPU), torch.equal",
    learn=learn, expect=expect,
    cases=tuple({**c, "dim": d} for c, d in zip(dp.CASES, (0, 1, 0, 1, 0, 0))),
    draw=lambda rng: {**(case := dp.draw(rng)), "dim": case["seed"] % 2},
    answers=("minidp.dp.gather", "torch.nn.parallel.scatter_gather"))  # fmt: skip
