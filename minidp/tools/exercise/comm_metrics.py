"""Exercises on the collectives that metrics use (lesson 9): all_gather, broadcast, and the
average of a metric over shards of different sizes.

all_gather and broadcast are collectives built from send/recv: minidp's own are
unavailable, and each rank's bytes are the algorithm's (all_gather: W-1 tensors per rank;
broadcast: W-1 tensors in all, one into each rank but the root). average_metric uses
minidp's ``all_reduce`` as its tool; its ranks must still send what an all-reduce of a
sum and a count must.

Test: ``pytest tests/test_exercises.py -k "all_gather or broadcast or average"``
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from minidp.tools.exercise import reference
from minidp.tools.exercise.comm_common import (
    CASES,
    COLLECTIVES,
    LOST_FRACTIONS,
    ROUNDED,
    comm_cases,
    exactly,
    learn_in_place,
    least_all_reduce,
    nbytes,
)
from minidp.tools.exercise.inputs import Case, dyadic, generator, values
from minidp.tools.exercise.spec import (
    Answer,
    Exercise,
    Expected,
    Mistake,
    Result,
    Traffic,
    everywhere,
    same,
)

UNSET = 77  # what output tensors hold before the learner's code runs: no input ever does

# ----------------------------------------------------------------------------- all_gather


def _learn_all_gather(fn, case, rank, world, group) -> Answer:
    x = values(case, rank)
    tensor_list = [torch.full_like(x, UNSET) for _ in range(world)]
    fn(tensor_list, x, group)
    return Answer(tensor_list)


def _expect_all_gather(case, rank, world, group) -> Expected:
    return Expected(reference.all_gather(values(case, rank), group))


def _unset(t: torch.Tensor) -> bool:
    return t.numel() > 0 and bool((t == UNSET).all())


def _only_own_missing(rank: int, r: Result) -> bool:
    others = [i for i in range(len(r.got)) if i != rank]
    return _unset(r.got[rank]) and all(same(r.got[i], r.expected[i]) for i in others)


def _some_unset(rank: int, r: Result) -> bool:
    return any(_unset(t) for t in r.got)


def _reordered(rank: int, r: Result) -> bool:
    """Every entry is some rank's tensor (maybe at another index)."""
    return all(any(same(g, e) for e in r.expected) for g in r.got)


ALL_GATHER = Exercise(
    name="all_gather",
    lesson="09_metrics_collectives",
    summary="all_gather: tensor_list[i] = rank i's tensor, on every rank",
    reference="torch.distributed.all_gather (gloo), torch.equal",
    learn=_learn_all_gather,
    expect=_expect_all_gather,
    cases=CASES,
    strategy=comm_cases,
    answers=COLLECTIVES,
    traffic=Traffic(
        bounds=exactly(lambda case, world, rank: (world - 1) * nbytes(case)),
        formula="an all-gather's share per rank, W-1 tensors",
        p2p_only=True,
        too_much=Mistake(
            "tensors sent more than once",
            "the values are right, but a rank sent more than W-1 tensors: in a ring each step "
            "passes on the one tensor received last; sent directly, each rank sends its own "
            "tensor once to every other rank.",
        ),
    ),
    mistakes=(
        LOST_FRACTIONS,
        ROUNDED,
        Mistake(
            "own entry missing",
            "tensor_list[rank] was never filled: nobody sends you your own tensor — copy it "
            "in yourself (tensor_list[rank].copy_(tensor)).",
            lambda case, results: everywhere(results, _only_own_missing),
        ),
        Mistake(
            "entries in the wrong order",
            "every rank's tensor arrived but sits at the wrong index: store what arrives at "
            "step s at the index of the rank it *came from* ((rank - s - 1) % world in a "
            "ring), not at index s.",
            lambda case, results: case["world"] > 1 and everywhere(results, _reordered),
        ),
        Mistake(
            "entries never filled",
            "some tensor_list entries still hold what they held before the call: a ring "
            "needs world-1 steps, each passing on the tensor received in the step before.",
            lambda case, results: everywhere(results, _some_unset),
        ),
    ),
)

# ----------------------------------------------------------------------------- broadcast


def _broadcast_cases():
    from hypothesis import strategies as st

    return comm_cases().flatmap(
        lambda c: st.integers(0, c["world"] - 1).map(lambda src: {**c, "src": src})
    )


def _learn_broadcast(fn, case, rank, world, group) -> Answer:
    return learn_in_place(lambda t, g: fn(t, case["src"], g), case, rank, world, group)


def _expect_broadcast(case, rank, world, group) -> Expected:
    x = values(case, rank)
    everyone = reference.all_gather(x.clone(), group)
    expected = reference.broadcast(x.clone(), case["src"], group)
    return Expected(expected, {"all": everyone, "input": x})


def _broadcast_bounds(case, world: int) -> list[tuple[int, int]]:
    """The root sends at least once; nobody sends more than W-1 tensors."""
    n = nbytes(case)
    return [(n if r == case["src"] else 0, (world - 1) * n) for r in range(world)]


def _not_in_place(case: Case, results: list[Result]) -> bool:
    return everywhere(
        results,
        lambda rank, r: same(r.got, r.extra["input"]) and same(r.extra["returned"], r.expected),
    )


BROADCAST = Exercise(
    name="broadcast",
    lesson="09_metrics_collectives",
    summary="broadcast: every rank ends with rank src's tensor, in place",
    reference="torch.distributed.broadcast (gloo), torch.equal",
    learn=_learn_broadcast,
    expect=_expect_broadcast,
    cases=tuple({**c, "src": (3 * i) % c["world"]} for i, c in enumerate(CASES)),
    strategy=_broadcast_cases,
    answers=COLLECTIVES,
    traffic=Traffic(
        bounds=_broadcast_bounds,
        total=lambda case, world: ((world - 1) * nbytes(case),) * 2,
        formula="a broadcast's, the tensor once into each rank but the root",
        p2p_only=True,
        too_much=Mistake(
            "a rank received the tensor twice",
            "the values are right, but more than W-1 copies of the tensor travelled: every "
            "rank but src must receive it exactly once (from src, or from a rank that "
            "already has it).",
        ),
    ),
    mistakes=(
        LOST_FRACTIONS,
        ROUNDED,
        Mistake(
            "ignored src",
            "every rank got rank 0's tensor, but src was another rank: send from `src`, "
            "not from rank 0.",
            lambda case, results: (
                case["src"] != 0
                and everywhere(results, lambda rank, r: same(r.got, r.extra["all"][0]))
            ),
        ),
        Mistake(
            "not in place",
            "the value you returned is right, but `tensor` itself is unchanged on the "
            "receiving ranks: receive into `tensor` (or tensor.copy_(...)), like "
            "torch.distributed.broadcast.",
            _not_in_place,
        ),
    ),
)

# ----------------------------------------------------------------------------- a metric's mean


def shard(case: Case, rank: int) -> torch.Tensor:
    """Rank ``rank``'s per-sample values: ``sizes[rank]`` of ``inputs.dyadic`` (float32:
    fractions, magnitudes from 0.002 to 1792, both signs, negative zero).

    Why those: their sums are exact in float32 and float64, so the mean over all samples
    has one rounding only (the division), whatever order the ranks add in.
    """
    return dyadic((case["sizes"][rank],), torch.float32, generator(case, rank))


def _metric_cases():
    from hypothesis import strategies as st

    sizes = st.lists(st.integers(0, 9), min_size=1, max_size=5).filter(lambda s: sum(s) > 0)
    return st.builds(lambda s, seed: {"world": len(s), "sizes": tuple(s), "seed": seed},
                     sizes, st.integers(0, 99))  # fmt: skip


def _shrink_metric(case: Case) -> Iterable[Case]:
    sizes = case["sizes"]
    for i in range(len(sizes)):  # drop a rank
        rest = sizes[:i] + sizes[i + 1 :]
        if rest and sum(rest):
            yield {**case, "world": len(rest), "sizes": rest}
    for i, n in enumerate(sizes):
        for smaller in (0, 1, n - 1):
            rest = sizes[:i] + (smaller,) + sizes[i + 1 :]
            if 0 <= smaller < n and sum(rest):
                yield {**case, "sizes": rest}
    if case["seed"]:
        yield {**case, "seed": 0}


def _learn_metric(fn, case, rank, world, group) -> Answer:
    return Answer(fn(shard(case, rank), group))


def _expect_metric(case, rank, world, group) -> Expected:
    shards = [shard(case, r) for r in range(world)]  # every rank's (the judge's side only)
    expected = torch.cat(shards).double().mean().item()  # torch's mean over every sample
    return Expected(expected, {"shards": shards})


def _mean_of_means(case, results) -> bool:
    means = [s.double().mean() for s in results[0].extra["shards"]]  # nan for an empty shard
    wrong = torch.stack(means).mean().item()
    return any(_close(r.got, wrong) for r in results)


def _local_only(case, results) -> bool:
    local = [s.double().mean().item() for s in results[0].extra["shards"]]
    return len(results) > 1 and all(_close(r.got, m) for r, m in zip(results, local))


def _close(got, value: float) -> bool:
    got = torch.as_tensor(float(got), dtype=torch.float64)
    value = torch.tensor(value, dtype=torch.float64)
    return bool(torch.isclose(got, value, rtol=1e-6, atol=1e-9, equal_nan=True))


AVERAGE_METRIC = Exercise(
    name="average_metric",
    lesson="09_metrics_collectives",
    summary="the mean of a metric over every sample, when ranks hold different numbers",
    reference="torch.cat(every rank's values).mean() in float64, rtol 1e-6",
    learn=_learn_metric,
    expect=_expect_metric,
    traffic=Traffic(
        bounds=lambda case, world: least_all_reduce(2, 4)(case, world),
        formula="an all-reduce of a sum and a count (float32 at least)",
    ),
    cases=(
        {"world": 1, "sizes": (3,), "seed": 0},
        {"world": 2, "sizes": (4, 4), "seed": 1},
        {"world": 2, "sizes": (3, 1), "seed": 2},
        {"world": 3, "sizes": (5, 2, 1), "seed": 3},
        {"world": 3, "sizes": (4, 0, 2), "seed": 4},
        {"world": 5, "sizes": (1, 7, 3, 3, 2), "seed": 5},
    ),
    strategy=_metric_cases,
    shrink=_shrink_metric,
    # Why not torch.equal: the exact mean is sum/count (sums of eighths are exact), but a
    # learner may divide in float32 (rounding at ~6e-8 relative) where torch's float64
    # mean does not; every wrong answer below is off by far more than 1e-6.
    tolerance=lambda case: (1e-6, 1e-9),
    mistakes=(
        Mistake(
            "mean of means",
            "you averaged the per-rank means; with shards of different sizes that weights "
            "each sample by 1/(its shard's size). All-reduce the sum and the count "
            "(tensor([sum, count])), then divide once.",
            _mean_of_means,
        ),
        Mistake(
            "local mean only",
            "every rank returned the mean of its own shard: nothing was all-reduced, so "
            "ranks disagree. Sum the values and the counts over all ranks first.",
            _local_only,
        ),
    ),
)
