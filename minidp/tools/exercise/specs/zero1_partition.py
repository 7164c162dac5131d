"""``zero1_partition`` (lesson 19) vs the owners in torch's ``ZeroRedundancyOptimizer`` on W
rank processes (every rank's own ``param_groups``, gathered)."""

import torch
import torch.distributed as dist
from torch import nn

from minidp.tools.exercise.spec import Exercise
from minidp.tools.exercise.specs.ddp import warm

ZERO_ANSWERS = ("torch.distributed.optim.zero_redundancy_optimizer.ZeroRedundancyOptimizer",
                "minidp.zero.partition", "minidp.zero.zero1.ZeroRedundancyOptimizer",
                "minidp.textbook.zero.TextbookZero1")  # fmt: skip


def warm_zero() -> None:
    """``torch.distributed.optim`` compiles functional optimizers at import (seconds)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401

    warm()


def torch_owners(zero, params: list[list[nn.Parameter]], group) -> list[list[int]]:
    """The owner rank of every parameter, per group, as torch's ZeRO partitioned them: each
    rank's local optimizer holds its own share (public), gathered from every rank."""
    where = {id(p): (g, i) for g, ps in enumerate(params) for i, p in enumerate(ps)}
    per_rank = [None] * dist.get_world_size(group)
    mine = [where[id(p)] for pg in zero.optim.param_groups for p in pg["params"]]
    dist.all_gather_object(per_rank, mine, group=group)
    owners = [[-1] * len(ps) for ps in params]
    for rank, places in enumerate(per_rank):
        for g, i in places:
            owners[g][i] = rank
    return owners


def learn(fn, case, rank, world, group):
    return fn([list(numels) for numels in case["groups"]], world)


def expect(case, rank, world, group):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    params = [[nn.Parameter(torch.zeros(n)) for n in numels] for numels in case["groups"]]
    groups = [{"params": ps} for ps in params]
    zero = ZeroRedundancyOptimizer(groups, torch.optim.SGD, process_group=group, lr=0.1)
    return torch_owners(zero, params, group)


CASES = (
    {"world": 2, "groups": [[3, 10, 4, 7, 1]]},  # 10 -> 0, 7 -> 1, 4 -> 1, 3 -> 0, 1 -> 1
    {"world": 3, "groups": [[5, 5, 5, 5]]},  # ties: stable order, the lowest rank
    {"world": 3, "groups": [[9, 2, 2], [6, 1, 4, 4]]},  # the totals carry over
    {"world": 1, "groups": [[4, 2], [3]]},
    {"world": 4, "groups": [[2, 9, 6]]},  # more ranks than parameters
    {"world": 2, "groups": [[1, 8, 1, 1]]},  # balancing counts is not balancing elements
)
EXERCISE = Exercise(
    reference="torch.distributed.optim.ZeroRedundancyOptimizer's partition (gloo), the same owners",
    learn=learn, expect=expect, cases=CASES,
    # 1-3 groups of 1-6 parameters of 1..12 elements: equal sizes and ties are common
    draw=lambda rng: {"world": rng.randint(1, 4), "groups": [
        [rng.randint(1, 12) for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 3))]},
    reference_processes=True, prepare=warm_zero, answers=ZERO_ANSWERS)  # fmt: skip
