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

from minidp.tools.exercise.clip_slips import (
    _copies,
    _local_norm,
    _no_clamp,
    _no_eps,
    _no_sqrt,
    _norm_is,
    _signed_max,
    _squares_averaged,
    _squares_max,
    _summed,
    shard,
)
from minidp.tools.exercise.comm_common import least_all_reduce
from minidp.tools.exercise.spec import Answer, Case, Exercise, Expected, Mistake, Traffic

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
            "inf-norm without abs()",
            "the inf-norm is the largest ABSOLUTE value: a gradient of -5 counts as 5. Take "
            'g.abs().max() on each rank before the all-reduce with op="max".',
            _norm_is(_signed_max),
        ),
        Mistake(
            "squares averaged over ranks",
            'the sum of squares was all-reduced with op="avg" (or divided by the world '
            "size): a norm sums every element's square over every rank — nothing is "
            'averaged. All-reduce with op="sum", then take the square root.',
            _norm_is(_squares_averaged),
        ),
        Mistake(
            "forgot the square root",
            "the value you returned (and clipped by) is the sum of squares: the 2-norm is "
            "its square root, taken once, after the all-reduce.",
            _norm_is(_no_sqrt),
        ),
        Mistake(
            "sums of squares combined with max",
            'for the 2-norm the ranks\' sums of squares must be ADDED (op="sum"): the '
            'largest of them is only the norm of one rank\'s shards. op="max" is for the '
            "inf-norm.",
            _norm_is(_squares_max),
        ),
        Mistake(
            "clipped copies, shards unchanged",
            "the norm is right but the shards you were given still hold their old values: "
            "clip_grad_norm_ scales the gradients IN PLACE (g.mul_(coef)); g = g * coef "
            "makes a new tensor that nobody keeps.",
            _copies,
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
