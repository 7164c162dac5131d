"""Exercise ``zero1_partition`` (lesson 19): which rank owns which parameter in ZeRO-1.

The learner gets the parameters' sizes (``numel``) per parameter group and the world
size, and returns the owner rank of every parameter, group by group. The rule, from
``ZeroRedundancyOptimizer._partition_parameters`` (torch 2.13): one running total of
elements per rank, kept across the groups; in each group, sort the parameters by numel,
largest first (Python's stable ``sorted``: equal sizes keep their order), and give each to
the rank with the smallest total so far (``_get_min_index``: the LOWEST such rank on a
tie). minidp's ``minidp.zero.partition.partition_parameters`` is the same rule.

Reference: torch's ``ZeroRedundancyOptimizer`` (local optimizer SGD) built on every rank
of a real gloo group of W ranks (it asks the group for its size and rank: rank processes
in the judge's reference worker) on zero-filled parameters of those sizes; the owners
are read from its ``_partition_parameters()`` (private), or where a torch
lacks it from every rank's public ``zero.optim.param_groups`` gathered over the group.
Lists of ints: exact. The classic mistakes' answers are computed beside it (``_greedy``,
``_round_robin``, ``_blocks``) and recognised exactly.

Test: ``pytest tests/test_exercise_set_b.py -k zero1``
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from minidp.exercise.ddp_grads import warm_ddp
from minidp.exercise.spec import Answer, Exercise, Expected, Mistake, everywhere

ZERO_ANSWERS = (
    "minidp.zero.partition",
    "minidp.zero.zero1.ZeroRedundancyOptimizer",
    "minidp.zero.textbook.TextbookZero1",
    "torch.distributed.optim.zero_redundancy_optimizer.ZeroRedundancyOptimizer",
)


def warm_zero(rank: int, world_size: int) -> None:
    """``Exercise.prepare``: torch DDP's first use, and ``torch.distributed.optim``'s import
    (it compiles functional optimizers: seconds) — paid once, before anything is forked."""
    from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401

    warm_ddp(rank, world_size)


def _torch_owners(zero, params: list[list[nn.Parameter]], group) -> list[list[int]]:
    """Owner rank of every parameter, per group, as torch's ZeRO partitioned them."""
    where = {id(p): (g, i) for g, ps in enumerate(params) for i, p in enumerate(ps)}
    owners = [[-1] * len(ps) for ps in params]
    partition = getattr(zero, "_partition_parameters", None)
    if partition is not None:
        per_rank = [[where[id(p)] for pg in groups for p in pg["params"]] for groups in partition()]
    else:  # public: each rank knows its own share; gather every rank's
        mine = [where[id(p)] for pg in zero.optim.param_groups for p in pg["params"]]
        per_rank = [None] * dist.get_world_size(group)
        dist.all_gather_object(per_rank, mine, group=group)
    for rank, places in enumerate(per_rank):
        for g, i in places:
            owners[g][i] = rank
    return owners


def _greedy(groups, world: int, *, sort=True, ties_high=False, per_group=False) -> list:
    """torch's rule; each flag is one classic slip."""
    totals, owners = [0] * world, []
    for numels in groups:
        if per_group:
            totals = [0] * world
        order = list(range(len(numels)))
        if sort:
            order = sorted(order, key=lambda i: numels[i], reverse=True)  # stable
        owned = [0] * len(numels)
        for i in order:
            lightest = [r for r in range(world) if totals[r] == min(totals)]
            rank = lightest[-1] if ties_high else lightest[0]
            owned[i] = rank
            totals[rank] += numels[i]
        owners.append(owned)
    return owners


def _round_robin(groups, world: int) -> list:
    """Parameter k (counting on through the groups, or from 0 in each) to rank k % W."""
    flat, answers, k = [], [], 0
    for numels in groups:
        flat.append([(k + i) % world for i in range(len(numels))])
        k += len(numels)
    answers.append(flat)
    answers.append([[i % world for i in range(len(numels))] for numels in groups])
    return answers


def _blocks(groups, world: int) -> list:
    """Consecutive blocks by count: ceil(n / W) per rank, or n // W with the first n % W
    ranks one more (``torch.tensor_split``'s way); per group or over all parameters."""

    def split(n: int) -> list[list[int]]:
        ceil = -(-n // world)
        by_ceil = [min(i // ceil, world - 1) for i in range(n)] if n else []
        even = [int(r) for r, chunk in enumerate(torch.arange(n).tensor_split(world))
                for _ in range(len(chunk))]  # fmt: skip
        return [by_ceil, even]

    answers = [list(per) for per in zip(*(split(len(numels)) for numels in groups))]
    total = sum(len(numels) for numels in groups)
    for flat in split(total):
        out, k = [], 0
        for numels in groups:
            out.append(flat[k : k + len(numels)])
            k += len(numels)
        answers.append(out)
    return answers


def _learn(fn, case, rank, world, group) -> Answer:
    got = fn([list(numels) for numels in case["groups"]], world)
    if isinstance(got, (list, tuple)):
        got = [list(g) if isinstance(g, (list, tuple)) else g for g in got]
    return Answer(got)


def _expect(case, rank, world, group) -> Expected:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    groups = [list(numels) for numels in case["groups"]]
    params = [[nn.Parameter(torch.zeros(n)) for n in numels] for numels in groups]
    zero = ZeroRedundancyOptimizer(
        [{"params": ps} for ps in params], torch.optim.SGD, process_group=group, lr=0.1
    )
    slips = {
        "round robin": _round_robin(groups, world),
        "blocks": _blocks(groups, world),
        "unsorted": [_greedy(groups, world, sort=False)],
        "ties high": [_greedy(groups, world, ties_high=True)],
        "per group": [_greedy(groups, world, per_group=True)],
    }
    return Expected(_torch_owners(zero, params, group), {"input": groups, "slips": slips})


def _is(slip: str):
    """A detector: on every rank the answer is one of the ``slip``'s answers (and wrong)."""
    return lambda case, results: everywhere(
        results, lambda rank, r: r.got != r.expected and r.got in r.extra["slips"][slip]
    )


def partition_cases():
    """Hypothesis strategy: world 1..4 (the rank processes up), 1-3 groups of 1-6
    parameters of 1..12 elements (so equal sizes, and ties between ranks, are common)."""
    from hypothesis import strategies as st

    numels = st.lists(st.integers(1, 12), min_size=1, max_size=6)
    return st.fixed_dictionaries(
        {"world": st.integers(1, 4), "groups": st.lists(numels, min_size=1, max_size=3)}
    )


def shrink_partition(case):
    """Smaller cases: fewer ranks, a group fewer, a parameter fewer."""
    groups = case["groups"]
    for w in range(1, case["world"]):
        yield {**case, "world": w}
    for g in range(len(groups)):
        if len(groups) > 1:
            yield {**case, "groups": groups[:g] + groups[g + 1 :]}
        for i in range(len(groups[g])):
            if len(groups[g]) > 1:
                smaller = groups[g][:i] + groups[g][i + 1 :]
                yield {**case, "groups": groups[:g] + [smaller] + groups[g + 1 :]}


CASES = (
    # largest first: 10 -> 0, 7 -> 1, 4 -> 1 (7 < 10), 3 -> 0 (10 < 11), 1 -> 1 (11 < 13)
    {"world": 2, "groups": [[3, 10, 4, 7, 1]]},
    # ties everywhere: equal sizes keep their order, equal totals go to the LOWEST rank
    {"world": 3, "groups": [[5, 5, 5, 5]]},
    # two groups: the totals carry over from the first group into the second
    {"world": 3, "groups": [[9, 2, 2], [6, 1, 4, 4]]},
    {"world": 1, "groups": [[4, 2], [3]]},
    # more ranks than parameters: some ranks own nothing
    {"world": 4, "groups": [[2, 9, 6]]},
)

ZERO1_PARTITION = Exercise(
    name="zero1_partition",
    lesson="19_zero1",
    summary="ZeRO-1's owners: largest parameter first, to the rank with the fewest elements",
    reference="torch.distributed.optim.ZeroRedundancyOptimizer's partition (gloo), the same owners",
    learn=_learn,
    expect=_expect,
    cases=CASES,
    strategy=partition_cases,
    reference_processes=True,
    generated=8,
    answers=ZERO_ANSWERS,
    shrink=shrink_partition,
    prepare=warm_zero,
    mistakes=(
        Mistake(
            "round robin",
            "parameter k went to rank k % W, whatever its size: torch balances the ELEMENTS "
            "each rank owns — give each parameter, largest first, to the rank that owns the "
            "fewest elements so far.",
            _is("round robin"),
        ),
        Mistake(
            "contiguous blocks by count",
            "you cut the parameter list into W blocks of equal COUNT: torch balances the "
            "elements — largest first, each to the rank with the smallest total so far.",
            _is("blocks"),
        ),
        Mistake(
            "not sorted by size",
            "greedy is right, but in the given order: sort each group's parameters by numel, "
            "LARGEST first (a stable sort: equal sizes keep their order), then assign.",
            _is("unsorted"),
        ),
        Mistake(
            "ties to the highest rank",
            "when several ranks own equally few elements, torch picks the LOWEST of them "
            "(totals.index(min(totals))), not the last one.",
            _is("ties high"),
        ),
        Mistake(
            "totals restarted in every group",
            "keep ONE running total per rank across all the parameter groups: torch does not "
            "restart at zero for the next group, so a later group fills the ranks the "
            "earlier ones left light.",
            _is("per group"),
        ),
    ),
)
