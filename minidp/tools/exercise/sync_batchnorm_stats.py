"""Exercise (lesson 24): SyncBatchNorm's statistics — the mean and variance of the global batch.

``sync_batchnorm_stats(x, group)``: every rank holds its own rows ``x`` (``(N_r, C)``,
float64; ranks may hold different numbers of rows). Return, on every rank, the
per-channel mean and *biased* variance of the whole batch — every row of every rank —
as ``(mean, var)``, two ``(C,)`` float64 tensors: what SyncBatchNorm normalises with.
The way: all-reduce ``[sum, sum of squares, count]`` (or the sum and count first, then
the sum of squared deviations from the global mean) and divide by the global count.

The torch component: ``torch.var_mean(torch.cat(every rank's x), dim=0, correction=0)``
in one process (what ``nn.BatchNorm1d`` computes in training mode on the full batch) for
the first two items; the third item is this rank's rows normalised with the learner's
``(mean, var)`` and ``eps``, compared with this rank's rows of
``torch.nn.functional.batch_norm(full batch, training=True, eps=eps)`` (BatchNorm1d's
forward). Tolerance ``rtol=1e-9, atol=1e-12``: the learner sums in another order than torch
and may use ``E[x²] - E[x]²``, whose float64 rounding is ~1e-15 relative here (offsets
stay within a few standard deviations); every classic mistake is off by more than 1e-3.

Run: ``python -m minidp exercise check sync_batchnorm_stats``;
test: ``pytest tests/test_exercise_set_a.py -k sync_batchnorm``
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from minidp.tools.exercise.comm_common import least_all_reduce
from minidp.tools.exercise.spec import Answer, Case, Exercise, Expected, Mistake, Result, Traffic

EPS = 1e-5  # BatchNorm's default eps, for the normalised rows
TOL = (1e-9, 1e-12)
LABELS = ["mean", "var", "your rows normalised with your mean and var"]

CASES = (
    {"world": 1, "sizes": (4,), "channels": 3, "seed": 0},
    {"world": 2, "sizes": (3, 3), "channels": 2, "seed": 1},
    {"world": 2, "sizes": (5, 2), "channels": 3, "seed": 2},
    {"world": 3, "sizes": (1, 6, 3), "channels": 4, "seed": 3},
    {"world": 4, "sizes": (2, 2, 7, 1), "channels": 1, "seed": 4},
    {"world": 5, "sizes": (3, 1, 4, 1, 5), "channels": 2, "seed": 5},
)


def rows(case: Case, rank: int) -> torch.Tensor:
    """Rank ``rank``'s ``(N_r, C)`` float64 rows: N(offset_r, scale) with an offset and a
    scale of each rank's own, so ranks differ in mean *and* spread (as real shards do)."""
    g = torch.Generator().manual_seed(case["seed"] * 1009 + rank * 31 + 7)
    c = case["channels"]
    offset = torch.randn(c, generator=g, dtype=torch.float64) * 2  # (C,)
    scale = 0.5 + torch.rand(c, generator=g, dtype=torch.float64)  # (C,)
    return torch.randn(case["sizes"][rank], c, generator=g, dtype=torch.float64) * scale + offset


def _stats_cases():
    from hypothesis import strategies as st

    # >= 2 rows in all: BatchNorm in training refuses a batch of one row per channel
    sizes = st.lists(st.integers(1, 6), min_size=1, max_size=5).filter(lambda s: sum(s) > 1)
    return st.builds(
        lambda s, c, seed: {"world": len(s), "sizes": tuple(s), "channels": c, "seed": seed},
        sizes,
        st.integers(1, 4),
        st.integers(0, 99),
    )


def _shrink(case: Case) -> Iterable[Case]:
    sizes = case["sizes"]
    for i in range(len(sizes)):  # drop a rank
        rest = sizes[:i] + sizes[i + 1 :]
        if sum(rest) > 1:
            yield {**case, "world": len(rest), "sizes": rest}
    for i, n in enumerate(sizes):  # fewer rows on one rank (at least one)
        for smaller in (1, n - 1):
            if 1 <= smaller < n and sum(sizes) - n + smaller > 1:
                yield {**case, "sizes": sizes[:i] + (smaller,) + sizes[i + 1 :]}
    if case["channels"] > 1:
        yield {**case, "channels": 1}
    if case["seed"]:
        yield {**case, "seed": 0}


def _normalised(answer, x: torch.Tensor):
    """``x`` normalised with the learner's (mean, var), or None if they cannot be used."""
    try:
        mean, var = answer
        return (x - mean) * (var + EPS).rsqrt()
    except Exception:
        return None


def _learn(fn, case, rank, world, group) -> Answer:
    x = rows(case, rank)
    answer = fn(x.clone(), group)
    got = answer
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        got = [answer[0], answer[1], _normalised(answer, x)]
    return Answer(got)


def _expect(case, rank, world, group) -> Expected:
    every = [rows(case, r) for r in range(world)]  # every rank's rows: the reference's batch
    full = torch.cat(every)  # (N, C)
    var, mean = torch.var_mean(full, dim=0, correction=0)  # biased, as BatchNorm normalises
    start = sum(case["sizes"][:rank])
    bn = F.batch_norm(full, None, None, training=True, eps=EPS)  # (N, C): BatchNorm1d's forward
    expected = [mean, var, bn[start : start + case["sizes"][rank]]]
    return Expected(expected, {"every": every, "labels": LABELS})


# ----------------------------------------------------------------------------- detectors


def _near(got, value: torch.Tensor) -> bool:
    return (
        isinstance(got, torch.Tensor)
        and got.shape == value.shape
        and bool(torch.allclose(got.double(), value, rtol=1e-7, atol=1e-10))
    )


def _item(r: Result, i: int):
    return r.got[i] if isinstance(r.got, list) and len(r.got) > i else None


def _local_only(case, results) -> bool:
    """Every rank returned the statistics of its own rows."""
    every = results[0].extra["every"]
    return len(results) > 1 and all(
        _near(_item(r, 0), every[rank].mean(0))
        and _near(_item(r, 1), every[rank].var(0, correction=0))
        for rank, r in enumerate(results)
    )


def _mean_of_means(case, results) -> bool:
    every = results[0].extra["every"]
    wrong = torch.stack([x.mean(0) for x in every]).mean(0)  # (C,)
    return len(set(case["sizes"])) > 1 and all(_near(_item(r, 0), wrong) for r in results)


def _local_count(case, results) -> bool:
    """The sums were all-reduced but divided by this rank's count times the world size."""
    every, world = results[0].extra["every"], len(results)
    total = torch.cat(every).sum(0)  # (C,)
    return len(set(case["sizes"])) > 1 and all(
        _near(_item(r, 0), total / (case["sizes"][rank] * world)) for rank, r in enumerate(results)
    )


def _averaged_variances(case, results) -> bool:
    """Right mean; the variance is an average of the per-rank variances (plain or weighted)."""
    every = results[0].extra["every"]
    local = torch.stack([x.var(0, correction=0) for x in every])  # (W, C)
    n = torch.tensor(case["sizes"], dtype=torch.float64)[:, None]  # (W, 1)
    plain, weighted = local.mean(0), (local * n).sum(0) / n.sum()
    return len(results) > 1 and all(
        _near(_item(r, 0), r.expected[0])
        and (_near(_item(r, 1), plain) or _near(_item(r, 1), weighted))
        for r in results
    )


def _pieces(case, results):
    """Per rank: rows n_r (W, 1), means (W, C), biased variances (W, C); the global mean."""
    every = results[0].extra["every"]
    n = torch.tensor(case["sizes"], dtype=torch.float64)[:, None]
    means = torch.stack([x.mean(0) for x in every])
    variances = torch.stack([x.var(0, correction=0) for x in every])
    return every, n, means, variances, torch.cat(every).mean(0)


def _pooled_unweighted(case, results) -> bool:
    """Within-rank variances weighted by rows, but the between-rank term unweighted:
    Σ n_r v_r / N + Σ (m_r - M)² / W."""
    _, n, means, variances, mean = _pieces(case, results)
    wrong = (variances * n).sum(0) / n.sum() + ((means - mean) ** 2).mean(0)
    return len(set(case["sizes"])) > 1 and all(
        _near(_item(r, 0), r.expected[0]) and _near(_item(r, 1), wrong) for r in results
    )


def _local_mean_squared(case, results) -> bool:
    """Σx²/N over every rank, minus the square of this rank's OWN mean."""
    every, _, means, _, _ = _pieces(case, results)
    squares = (torch.cat(every) ** 2).mean(0)
    return len(results) > 1 and all(
        _near(_item(r, 0), r.expected[0]) and _near(_item(r, 1), squares - means[rank] ** 2)
        for rank, r in enumerate(results)
    )


def _divided_by_world(case, results) -> bool:
    """The per-channel sums were all-reduced, then divided by the number of ranks."""
    every = results[0].extra["every"]
    wrong = torch.cat(every).sum(0) / len(results)
    return all(_near(_item(r, 0), wrong) for r in results) and not _near(
        wrong, results[0].expected[0]
    )


def _local_variance(case, results) -> bool:
    """Right mean; the variance about it over this rank's rows only."""
    every, _, _, _, mean = _pieces(case, results)
    return len(results) > 1 and all(
        _near(_item(r, 0), r.expected[0])
        and _near(_item(r, 1), ((every[rank] - mean) ** 2).mean(0))
        for rank, r in enumerate(results)
    )


def _unbiased(case, results) -> bool:
    full = torch.cat(results[0].extra["every"])
    return full.shape[0] > 1 and all(_near(_item(r, 1), full.var(0, correction=1)) for r in results)


SYNC_BATCHNORM_STATS = Exercise(
    name="sync_batchnorm_stats",
    lesson="24_sync_batchnorm",
    summary="SyncBatchNorm's statistics: global mean and biased variance from uneven shards",
    reference="torch.var_mean(torch.cat(every rank's x), dim=0, correction=0) and "
    "torch.nn.functional.batch_norm (training) on the full batch, float64, rtol 1e-9",
    learn=_learn,
    expect=_expect,
    answers=("minidp.nn.sync_batchnorm.SyncBatchNorm",),
    traffic=Traffic(
        bounds=lambda case, world: least_all_reduce(2 * case["channels"] + 1)(case, world),
        formula="an all-reduce of [Σx, Σx², n] per channel (float64)",
    ),
    cases=CASES,
    strategy=_stats_cases,
    shrink=_shrink,
    tolerance=lambda case: TOL,
    mistakes=(
        Mistake(
            "local statistics only",
            "every rank returned the mean and variance of its own rows: nothing was "
            "all-reduced, so ranks normalise differently. Each rank needs statistics of the "
            "whole batch: which per-channel totals, summed over ranks, make them?",
            _local_only,
        ),
        Mistake(
            "mean of means",
            "you averaged the per-rank means; with shards of different sizes that weights a "
            "row of a small shard more than a row of a big one. All-reduce the sum and the "
            "count, then divide once: mean = Σx / N.",
            _mean_of_means,
        ),
        Mistake(
            "count not all-reduced",
            "the sums are global but the count is not: you divided by this rank's rows times "
            "the world size. Ranks hold different numbers of rows — all-reduce the count "
            "with the sums (one tensor [Σx, Σx², n]) and divide by the global N.",
            _local_count,
        ),
        Mistake(
            "averaged the variances",
            "the mean is right, but the variance averages the per-rank variances: that "
            "leaves out how far each rank's mean lies from the global mean (the spread "
            "*between* ranks). Work from global sums instead of local variances.",
            _averaged_variances,
        ),
        Mistake(
            "between-rank term unweighted",
            "the within-rank variances are weighted by their rows, but the between-rank "
            "term Σ (m_r - M)² is divided by the number of ranks: each rank's mean stands for "
            "n_r rows, so it needs the same weight, Σ n_r (m_r - M)² / N.",
            _pooled_unweighted,
        ),
        Mistake(
            "mean² from the local mean",
            "E[x²] is global, but the mean you square is this rank's own: var = E[x²] - M² "
            "needs the GLOBAL mean M — the one you return — or ranks normalise differently.",
            _local_mean_squared,
        ),
        Mistake(
            "sums divided by the world size",
            "you divided the all-reduced sums by the number of ranks: that is a mean of "
            "per-rank sums, not of rows. The mean is over every ROW: divide by the total row "
            "count N, which must be all-reduced too (ranks hold different numbers of rows).",
            _divided_by_world,
        ),
        Mistake(
            "variance over this rank's rows only",
            "the mean is global, but the variance is taken over your own rows only: the "
            "squared deviations (or squares) must be summed over every rank's rows too, "
            "and divided by the global N.",
            _local_variance,
        ),
        Mistake(
            "unbiased variance",
            "you divided by N - 1: BatchNorm normalises with the biased variance (divide by "
            "N, correction=0). The unbiased one is only what goes into running_var.",
            _unbiased,
        ),
    ),
)
