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
Lists of ints: exact. The classic mistakes' answers are computed beside it
(``partition_rule.py``) and recognised exactly.

Test: ``pytest tests/test_exercise_set_b.py -k zero1``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.tools.exercise.ddp_grads import warm_ddp
from minidp.tools.exercise.partition_rule import (
    _blocks,
    _greedy,
    _round_robin,
    _sorted_across_groups,
    _torch_owners,
)
from minidp.tools.exercise.spec import Answer, Exercise, Expected, Mistake, everywhere

ZERO_ANSWERS = (
    "minidp.zero.partition",
    "minidp.zero.zero1.ZeroRedundancyOptimizer",
    "minidp.textbook.zero.TextbookZero1",
    "torch.distributed.optim.zero_redundancy_optimizer.ZeroRedundancyOptimizer",
)


def warm_zero(rank: int, world_size: int) -> None:
    """``Exercise.prepare``: torch DDP's first use, and ``torch.distributed.optim``'s import
    (it compiles functional optimizers: seconds) — paid once, before anything is forked."""
    from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: F401

    warm_ddp(rank, world_size)


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
        "unsorted": [_greedy(groups, world, sort="none")],
        "ascending": [_greedy(groups, world, sort="ascending")],
        "reversed ties": [_greedy(groups, world, sort="reversed")],
        "index by value": [_greedy(groups, world, index_by_value=True)],
        "by count": [_greedy(groups, world, by_count=True)],
        "across groups": [_sorted_across_groups(groups, world)],
        "ties high": [_greedy(groups, world, ties_high=True)],
        "per group": [_greedy(groups, world, per_group=True)],
    }
    return Expected(_torch_owners(zero, params, group), {"input": groups, "slips": slips})


def _is(slip: str):
    """A detector: on every rank the answer is one of the ``slip``'s answers (and wrong),
    and no other slip gives that answer here (a case that cannot tell them apart names
    none: another case will)."""

    def test(rank: int, r) -> bool:
        slips = r.extra["slips"]
        if r.got == r.expected or r.got not in slips[slip]:
            return False
        return not any(r.got in answers for name, answers in slips.items() if name != slip)

    return lambda case, results: everywhere(results, test)


def partition_cases():
    """Hypothesis strategy: world 1..4, 1-3 groups of 1-6
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
    # one big parameter against three small: balancing counts is not balancing elements
    {"world": 2, "groups": [[1, 8, 1, 1]]},
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
            "sorted smallest first",
            "you sorted the parameters by size ASCENDING: torch gives the LARGEST first "
            "(sorted(..., reverse=True)), so the big ones spread over the ranks before the "
            "small ones fill the gaps.",
            _is("ascending"),
        ),
        Mistake(
            "equal sizes in reverse order",
            "you sorted ascending and reversed the list: parameters of equal size then come "
            "last-first. torch's sort is stable — sorted(range(n), key=..., reverse=True) "
            "keeps equal sizes in their order.",
            _is("reversed ties"),
        ),
        Mistake(
            "found a parameter by its size",
            "numels.index(size) finds the FIRST parameter of that size, every time: with "
            "equal sizes one parameter is assigned twice and another never. Sort the "
            "POSITIONS (sorted(range(len(numels)), key=lambda i: numels[i], reverse=True)).",
            _is("index by value"),
        ),
        Mistake(
            "balanced parameter counts",
            "you gave each parameter to the rank owning the fewest PARAMETERS: torch balances "
            "ELEMENTS — the rank whose owned numels add up to the least.",
            _is("by count"),
        ),
        Mistake(
            "sorted across the groups",
            "you sorted every group's parameters together: torch goes group by group (the "
            "running totals carry over), sorting each group's parameters on their own.",
            _is("across groups"),
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
