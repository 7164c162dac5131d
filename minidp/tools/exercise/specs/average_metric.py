"""``average_metric`` (lesson 9): a mean over ranks of different counts, vs ``torch.cat(every
rank's values).double().mean()``; sums are exact, rtol 1e-6 for a float32 division."""

import torch

from minidp.tools.exercise.inputs import dyadic, generator, spare
from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs.comm import least_all_reduce

shard = lambda case, rank: dyadic((case["sizes"][rank],), torch.float32, generator(case, rank))


def learn(fn, case, rank, world, group):
    return [fn(mine := shard(case, rank), group), mine]  # (a 1-element tensor: a number)


def expect(case, rank, world, group):
    mean = torch.cat([shard(case, r) for r in range(world)]).double().mean().item()
    labels = ["the mean", "your values after the call (unchanged)"]
    return Expected([mean, shard(case, rank)], labels)


def draw(rng):
    sizes = [rng.randint(0, 9) for _ in range(rng.randint(1, 5))]
    sizes[-1] += not sum(sizes)  # some rank holds a sample
    return {"world": len(sizes), "sizes": tuple(sizes), "seed": rng.randint(0, 99),
            **spare(rng)}  # fmt: skip


CASES = tuple({"world": len(s), "sizes": s, "seed": i, **more} for i, (s, more) in enumerate((
    ((3,), {}), ((4, 4), {}), ((3, 1), {}), ((5, 2, 1), {}), ((4, 0, 2), {}),
    ((1, 7, 3, 3, 2), {}), ((2, 5, 1), {"spare": 1}))))  # fmt: skip
EXERCISE = Exercise(
    reference="torch.cat(every rank's values).mean() in float64, rtol 1e-6", learn=learn,
    expect=expect, cases=CASES, draw=draw, tolerance=lambda case: (1e-6, 1e-9),
    traffic=Traffic(least_all_reduce(2, 4),
                    "an all-reduce of a sum and a count, float32"))  # fmt: skip
