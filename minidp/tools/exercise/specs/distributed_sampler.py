"""``distributed_sampler`` (lesson 12) vs ``DistributedSampler`` after ``set_epoch``."""

import torch

from minidp.tools.exercise.spec import Exercise


def learn(fn, case, rank, world, group):
    return fn(case["n"], world, rank, *[case[k] for k in ("epoch", "seed", "shuffle", "drop_last")])


def expect(case, rank, world, group):
    sampler = torch.utils.data.DistributedSampler(range(case["n"]), world, rank, case["shuffle"],
                                                  case["seed"], case["drop_last"])  # fmt: skip
    sampler.set_epoch(case["epoch"])
    return list(sampler)


# 10 on 3 ranks pads to 12 (indices 0 and 1 twice); drop_last cuts 9 to 8 on 2
CASES = tuple({"world": w, "n": n, "epoch": e, "seed": s, "shuffle": sh, "drop_last": d}
              for w, n, e, s, sh, d in ((1, 6, 1, 0, True, False), (2, 8, 0, 0, False, False),
                                        (3, 10, 0, 0, False, False), (3, 10, 2, 7, True, False),
                                        (2, 9, 3, 1, True, True), (5, 3, 1, 2, True, False),
                                        (3, 2, 0, 0, False, True)))  # fmt: skip
EXERCISE = Exercise(
    reference="torch.utils.data.DistributedSampler after set_epoch(epoch), the same list",
    learn=learn, expect=expect, cases=CASES,
    draw=lambda rng: {"world": rng.randint(1, 5), "n": rng.randint(0, 30),
                      "epoch": rng.randint(0, 5), "seed": rng.randint(0, 99),
                      "shuffle": rng.random() < 0.5, "drop_last": rng.random() < 0.5},
    answers=("torch.utils.data.distributed.DistributedSampler",
             "minidp.ddp.sampler.DistributedSampler",
             "minidp.textbook.sampler.DistributedSampler"))  # fmt: skip
