"""Exercise (lesson 32): ``clip_grad_norm_`` when every rank holds only shards of the gradients.

``clip_grad_norm_shards(shards, max_norm, norm_type, group)``: ``shards[i]`` is this rank's
dim-0 shard of gradient i (``torch.chunk`` rows, as FSDP shards them: possibly empty).
The learner returns the *global* norm of all the gradients (2-norm, or ``inf``: the largest
absolute value) and scales its shards in place by torch's clip coefficient
``min(max_norm / (total_norm + 1e-6), 1)`` — the same factor on every rank.

The torch component: ``torch.nn.utils.clip_grad_norm_`` on the full gradients in one
process (every rank rebuilds them from the case): its returned norm, and this rank's
``torch.chunk`` rows of the gradients it clipped. Compared as
``[total norm, clipped shard 0, clipped shard 1, ...]``.

Tolerance: float64 ``rtol=1e-12``; float32 ``rtol=1e-5, atol=1e-6``. torch takes the norm
of the per-gradient norms; the learner sums squares over shards and ranks, in another
order, and may scale in another precision. Every classic mistake is off by far more
(forgetting torch's ``+ 1e-6`` only shows in float64, ~1e-7 relative).

The reference runs in the judge's process, after the sandbox is gone: a learner's file
that patches ``torch.nn.utils.clip_grad`` patches only the sandbox's copy.

Inputs: the full gradients are N(0, 1) with per-gradient scales from 1e-3 to 1e3 (large
and small magnitudes side by side, both signs) and a few negative zeros.

Run: ``python -m minidp exercise check clip_grad_norm_shards``;
test: ``pytest tests/test_exercise_set_a.py -k clip_grad``
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch.nn.utils import clip_grad_norm_

from minidp.exercise.comm_common import least_all_reduce
from minidp.exercise.spec import Answer, Case, Exercise, Expected, Mistake, Result, Traffic

INF = math.inf
SCALES = (1e-3, 1.0, 1e3)  # gradient i is N(0, 1) * SCALES[i % 3]

CASES = (
    {"world": 1, "shapes": ((3, 2), (4,)), "max_norm": 1.0, "norm_type": 2.0, "seed": 0},
    {"world": 2, "shapes": ((4, 3), (3,)), "max_norm": 1.0, "norm_type": 2.0, "seed": 1},
    {"world": 2, "shapes": ((2, 2),), "max_norm": 100.0, "norm_type": 2.0, "seed": 2},
    {"world": 3, "shapes": ((5, 2), (2,), (1, 3)), "max_norm": 0.5, "norm_type": 2.0, "seed": 3},
    {"world": 2, "shapes": ((3, 2), (5,)), "max_norm": 0.5, "norm_type": INF, "seed": 4},
    {"world": 4, "shapes": ((6, 2), (3,)), "max_norm": 1.0, "norm_type": INF, "seed": 5},
    {"world": 3, "shapes": ((4, 4),), "max_norm": 2.0, "norm_type": 2.0, "dtype": "float32",
     "seed": 6},
    {"world": 5, "shapes": ((7,), (3, 2)), "max_norm": 50.0, "norm_type": INF, "seed": 7},
)  # fmt: skip


def full_grads(case: Case) -> list[torch.Tensor]:
    """The full gradients (the same on every rank): N(0, 1) times 1e-3, 1 or 1e3 (in turn),
    every seventh element a negative zero, in the case's dtype."""
    g = torch.Generator().manual_seed(case["seed"] * 977 + 13)
    dtype = getattr(torch, case.get("dtype", "float64"))
    out = []
    for i, s in enumerate(case["shapes"]):
        t = torch.randn(s, generator=g, dtype=torch.float64) * SCALES[i % len(SCALES)]
        t.view(-1)[::7] = -0.0
        out.append(t.to(dtype))
    return out


def shard(t: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s ``torch.chunk`` rows of ``t`` (empty when the chunks run out)."""
    chunks = t.chunk(world)
    return chunks[rank].clone() if rank < len(chunks) else t.new_empty((0, *t.shape[1:]))


def _clip_cases():
    from hypothesis import strategies as st

    # rows >= 1: torch's inf-norm of an empty gradient raises (no identity for max); a
    # rank's *shard* is still empty whenever a gradient has fewer rows than the world
    shape = st.one_of(st.tuples(st.integers(1, 7)), st.tuples(st.integers(1, 6), st.integers(1, 3)))
    return st.fixed_dictionaries(
        {
            "world": st.integers(1, 5),
            "shapes": st.lists(shape, min_size=1, max_size=3).map(tuple),
            "max_norm": st.sampled_from((0.25, 1.0, 100.0)),
            "norm_type": st.sampled_from((2.0, INF)),
            "dtype": st.sampled_from(("float64", "float32")),
            "seed": st.integers(0, 99),
        }
    )


def _shrink(case: Case) -> Iterable[Case]:
    for w in range(1, case["world"]):
        yield {**case, "world": w}
    shapes = case["shapes"]
    for i in range(len(shapes)):
        if len(shapes) > 1:
            yield {**case, "shapes": shapes[:i] + shapes[i + 1 :]}
    if case.get("dtype", "float64") != "float64":
        yield {**case, "dtype": "float64"}
    if case["seed"]:
        yield {**case, "seed": 0}


def _learn(fn, case, rank, world, group) -> Answer:
    mine = [shard(t, world, rank) for t in full_grads(case)]
    answer = fn(mine, case["max_norm"], case["norm_type"], group)
    got = answer.item() if isinstance(answer, torch.Tensor) and answer.numel() == 1 else answer
    return Answer([got, *mine])


def _expect(case, rank, world, group) -> Expected:
    full = full_grads(case)
    params = [torch.zeros_like(t, requires_grad=True) for t in full]
    for p, t in zip(params, full):
        p.grad = t.clone()
    norm = clip_grad_norm_(params, case["max_norm"], norm_type=case["norm_type"])
    expected = [float(norm)] + [shard(p.grad, world, rank) for p in params]
    labels = ["total norm"] + [f"shard of gradient {i}" for i in range(len(full))]
    return Expected(expected, {"full": full, "labels": labels})


# ----------------------------------------------------------------------------- detectors


def _norms(case, full: list[torch.Tensor], world: int) -> list[float]:
    """Each rank's local norm of its shards (float64)."""
    p = case["norm_type"]
    out = []
    for rank in range(world):
        flat = torch.cat([shard(t, world, rank).double().reshape(-1) for t in full])
        out.append(float(torch.linalg.vector_norm(flat, p)) if flat.numel() else 0.0)
    return out


def _close(a, b: float, rtol: float = 1e-6) -> bool:
    return isinstance(a, (int, float)) and math.isclose(a, b, rel_tol=rtol, abs_tol=1e-9)


def _scaled_by(r: Result, rank: int, world: int, coef: float) -> bool:
    """Every shard is the unclipped shard times ``coef``."""
    return all(
        isinstance(g, torch.Tensor)
        and g.shape == (s := shard(t, world, rank)).shape
        and torch.allclose(g.double(), s.double() * coef, rtol=1e-6, atol=1e-9)
        for g, t in zip(r.got[1:], r.extra["full"])
    )


def _local_norm(case, results) -> bool:
    world = len(results)
    local = _norms(case, results[0].extra["full"], world)
    return (
        world > 1
        and all(_close(r.got[0], n) for r, n in zip(results, local))
        and any(not _close(r.got[0], r.expected[0]) for r in results)
    )


def _summed(case, results) -> bool:
    """The per-rank norms (2-norm) or maxima (inf) were added up."""
    world = len(results)
    total = sum(_norms(case, results[0].extra["full"], world))
    return world > 1 and all(
        _close(r.got[0], total) and not _close(r.got[0], r.expected[0]) for r in results
    )


def _no_clamp(case, results) -> bool:
    """Right norm; the shards scaled by max_norm / norm although that is > 1."""
    world = len(results)
    norm = results[0].expected[0]
    coef = case["max_norm"] / (norm + 1e-6)
    return coef > 1.01 and all(
        _close(r.got[0], norm, 1e-9) and _scaled_by(r, rank, world, coef)
        for rank, r in enumerate(results)
    )


def _no_eps(case, results) -> bool:
    """Right norm; the shards scaled by max_norm / norm, without torch's + 1e-6."""
    world = len(results)
    norm = results[0].expected[0]
    coef = case["max_norm"] / norm if norm else INF
    return coef < 1 and all(
        _close(r.got[0], norm, 1e-9) and _scaled_by(r, rank, world, coef)
        for rank, r in enumerate(results)
    )


SUM_HINT = (
    "norms do not add: ‖(a, b)‖₂ = sqrt(‖a‖² + ‖b‖²). All-reduce (sum) each rank's *sum of "
    "squares*, then take the square root once."
)
INF_HINT = (
    "the inf-norm is the largest |g| over every rank: all-reduce the local maxima with "
    'op="max", not "sum".'
)

CLIP_GRAD_NORM_SHARDS = Exercise(
    name="clip_grad_norm_shards",
    lesson="32_clip_and_accumulate_sharded",
    summary="clip_grad_norm_ on sharded gradients: the global norm, one clip factor for all",
    reference="torch.nn.utils.clip_grad_norm_ on the full gradients (its norm, this rank's "
    "torch.chunk rows of what it clipped); float64 rtol 1e-12, float32 rtol 1e-5",
    learn=_learn,
    expect=_expect,
    traffic=Traffic(
        bounds=least_all_reduce(1, 4),
        formula="an all-reduce of one partial norm (float32 at least)",
    ),
    cases=CASES,
    strategy=_clip_cases,
    shrink=_shrink,
    tolerance=lambda case: (1e-5, 1e-6) if case.get("dtype") == "float32" else (1e-12, 1e-15),
    mistakes=(
        Mistake(
            "local norm only",
            "each rank used the norm of its own shards: that is only a part of the norm, so "
            "ranks clip by different factors and their replicas drift apart. Combine the "
            "parts over every rank (all-reduce) before you use the norm.",
            _local_norm,
        ),
        Mistake(
            "inf-norm summed",
            INF_HINT,
            lambda case, results: case["norm_type"] == INF and _summed(case, results),
        ),
        Mistake(
            "summed the norms",
            SUM_HINT,
            lambda case, results: case["norm_type"] != INF and _summed(case, results),
        ),
        Mistake(
            "no clamp to 1",
            "the norm is below max_norm, so torch leaves the gradients alone: the clip "
            "coefficient is min(max_norm / (total_norm + 1e-6), 1) — you scaled them *up*.",
            _no_clamp,
        ),
        Mistake(
            "forgot the 1e-6",
            "torch's coefficient is max_norm / (total_norm + 1e-6) (the 1e-6 guards against "
            "a zero norm): add it, so your gradients match torch's to the last digits.",
            _no_eps,
        ),
    ),
)
