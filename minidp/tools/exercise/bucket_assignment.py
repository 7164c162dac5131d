"""Exercise ``bucket_assignment`` (lesson 11): which gradients DDP puts in which bucket.

The learner gets every parameter's ``numel`` and ``dtype`` in registration order
(``model.parameters()``) and the bucket size limits ``[first_cap, cap]`` in bytes, and
returns the buckets DDP *rebuilds* after its first backward, as lists of parameter
indices, in DDP's order. DDP's rebuild (``Reducer::rebuild_buckets`` in ``reducer.cpp``)
calls torch's ``torch.distributed._compute_bucket_assignment_by_size`` with the
parameters in the order their gradients became ready *and* their indices in that order
(``tensor_indices``) — and with indices given, torch does not sort the buckets. The rule,
as torch 2.13 (and 2.15) run it:

* walk the parameters LAST to first (the order their gradients become ready in a plain
  stack of layers);
* one open bucket per dtype (and device); add the parameter's bytes, and close the
  bucket as soon as it holds ``>=`` the current limit (the parameter that crosses the cap
  stays in);
* each dtype walks the limits on its own: its first bucket is held to ``limits[0]``
  (DDP's small first bucket), the next to ``limits[1]``, ...; the last repeats;
* the buckets come in the order they **closed**; the buckets still open at the end come
  after them, the dtype that first appeared *last* in the walk first (torch keeps the
  open buckets in a hash map; this is the order it yields them in); inside a bucket,
  walk order.

With one dtype that is simply walk order. With mixed dtypes it is *not* the order of each
bucket's first parameter: that order is what torch's function returns when called
*without* ``tensor_indices`` (the sorted order the spec once demanded, which DDP's
rebuilt buckets do not have). ``tests/test_exercise_set_b.py`` holds the reference to a
real DDP's rebuilt buckets (``rebuilt_per_bucket_param_indices`` in its logging data) on
a mixed-dtype model.

Reference: torch's function, called as the rebuild calls it, on ``numel``-sized tensors on
the ``meta`` device (no memory) in walk order, positions mapped back to registration
indices. It is private: where a torch lacks it, the checker's own port (``bucket_rule._walk``,
the same rule, also the source of the classic mistakes' answers) is the reference; the
tests hold them equal. A pure function: every thread rank computes the same buckets. Lists
of ints: exact.

Test: ``pytest tests/test_exercise_set_b.py -k bucket``
"""

from __future__ import annotations

import torch

from minidp.tools.exercise.bucket_rule import SLIPS, _walk, torch_buckets
from minidp.tools.exercise.spec import Answer, Exercise, Expected, Mistake, Result, everywhere

MIB = 1024 * 1024
DTYPES = ("float32", "float64", "float16", "bfloat16")


def _learn(fn, case, rank, world, group) -> Answer:
    numels, names, limits = list(case["numels"]), list(case["dtypes"]), list(case["limits"])
    got = fn(numels, [getattr(torch, n) for n in names], limits)
    if isinstance(got, tuple):
        got = list(got)
    if isinstance(got, list):
        got = [list(b) if isinstance(b, (list, tuple)) else b for b in got]
    return Answer(got)


def _expect(case, rank, world, group) -> Expected:
    numels, names, limits = list(case["numels"]), list(case["dtypes"]), list(case["limits"])
    variants = {slip: _walk(numels, names, limits, **{slip: True}) for slip in SLIPS}
    sizes = [n * getattr(torch, d).itemsize for n, d in zip(numels, names)]
    return Expected(torch_buckets(numels, names, limits), {"input": sizes, **variants})


def _canonical(buckets) -> list:
    """The buckets as sets, whatever their order (a wrong answer's order may differ)."""
    try:
        return sorted(sorted(int(i) for i in b) for b in buckets)
    except TypeError:
        return [buckets]


def _slip(r: Result) -> str | None:
    """Which slip's buckets this answer is: the one slip whose (wrong) buckets it equals
    exactly, else the one it equals as sets (a wrong answer may also list its buckets in
    another order). None where two slips give the same answer: that case cannot say which
    slip it is, and another case will."""
    wrong = [s for s in SLIPS if r.extra[s] != r.expected]
    exact = [s for s in wrong if r.got == r.extra[s]]
    if exact:
        return exact[0] if len(exact) == 1 else None
    right = _canonical(r.expected)
    loose = [s for s in wrong if _canonical(r.extra[s]) != right]
    loose = [s for s in loose if _canonical(r.got) == _canonical(r.extra[s])]
    return loose[0] if len(loose) == 1 else None


def _is(variant: str):
    """A detector: on every rank the answer is the ``variant`` slip's buckets."""
    return lambda case, results: everywhere(results, lambda rank, r: _slip(r) == variant)


def _reordered(case, results) -> bool:
    return everywhere(results, lambda rank, r: _canonical(r.got) == _canonical(r.expected))


def _st():
    from hypothesis import strategies

    return strategies


def bucket_cases():
    """Hypothesis strategy: 1..7 parameters of 1..40 elements, 1-3 dtypes, small caps."""
    st = _st()
    n = st.integers(1, 7)
    return n.flatmap(
        lambda k: st.fixed_dictionaries(
            {
                "world": st.integers(1, 3),
                "numels": st.lists(st.integers(1, 40), min_size=k, max_size=k),
                "dtypes": st.lists(st.sampled_from(DTYPES[:3]), min_size=k, max_size=k),
                "limits": st.lists(st.sampled_from([8, 16, 24, 40, 64, 100]), min_size=1,
                                   max_size=3),
            }
        )
    )  # fmt: skip


def shrink_buckets(case):
    """Smaller cases: fewer ranks, then one parameter fewer, then one limit fewer."""
    for w in range(1, case["world"]):
        yield {**case, "world": w}
    for i in range(len(case["numels"])):
        if len(case["numels"]) > 1:
            keep = [j for j in range(len(case["numels"])) if j != i]
            yield {
                **case,
                "numels": [case["numels"][j] for j in keep],
                "dtypes": [case["dtypes"][j] for j in keep],
            }
    if len(case["limits"]) > 1:
        yield {**case, "limits": case["limits"][:-1]}


F32, F64, F16 = "float32", "float64", "float16"
CASES = (
    # bytes last to first: 8, 20 | 16, 24 — the first bucket closes at 28 >= 24 (first
    # cap), the second reaches the cap 40 exactly
    {"world": 1, "numels": [6, 4, 5, 2], "dtypes": [F32] * 4, "limits": [24, 40]},
    # 16 + 8 = 24 reaches the first cap exactly (>=, not >); then 40 exactly
    {"world": 2, "numels": [4, 6, 2, 4], "dtypes": [F32] * 4, "limits": [24, 40]},
    # two dtypes: each gets its own buckets and its own small first cap
    {
        "world": 3,
        "numels": [3, 3, 2, 5, 3, 2],
        "dtypes": [F32, F64, F32, F64, F32, F64],
        "limits": [16, 40],
    },
    # the first cap matters: 12 bytes would not close a 40-byte bucket
    {"world": 2, "numels": [10, 3, 3, 3], "dtypes": [F32] * 4, "limits": [12, 40]},
    # one limit only (a user's bucket_cap_mb: no small first bucket); float16
    {"world": 3, "numels": [5, 7, 1, 8, 9], "dtypes": [F16] * 5, "limits": [16]},
    # DDP's defaults, 1 MiB then 25 MiB, on a model of a few million floats
    {
        "world": 1,
        "numels": [2_000_000, 2048, 262_144, 4_000_000, 512, 1_048_576],
        "dtypes": [F32] * 6,
        "limits": [MIB, 25 * MIB],
    },
)

BUCKET_ASSIGNMENT = Exercise(
    name="bucket_assignment",
    lesson="11_buckets_overlap",
    summary="DDP's rebuilt buckets: last parameter first, per dtype, close at >= cap, in "
    "closing order",
    reference="torch.distributed._compute_bucket_assignment_by_size as DDP's rebuild calls it "
    "(with tensor_indices), the same buckets in the same order",
    learn=_learn,
    expect=_expect,
    answers=(
        "torch.distributed._compute_bucket_assignment_by_size",
        "minidp.ddp.buckets",
        "minidp.textbook.ddp",
    ),  # fmt: skip
    cases=CASES,
    strategy=bucket_cases,
    shrink=shrink_buckets,
    mistakes=(
        Mistake(
            "walked first to last",
            "walk the parameters LAST to first (reversed(range(len(numels)))): the last "
            "layer's gradients are ready first, so they fill the first, small bucket.",
            _is("forward"),
        ),
        Mistake(
            "bucket closed past the cap",
            "close a bucket as soon as it holds >= the limit, not only when it exceeds it: "
            "16 + 8 bytes with a cap of 24 make one full bucket.",
            _is("past_cap"),
        ),
        Mistake(
            "no small first bucket",
            "each dtype's FIRST bucket is held to bucket_size_limits[0] (DDP's 1 MiB), the "
            "next to bucket_size_limits[1], and so on — the last limit repeats.",
            _is("one_cap"),
        ),
        Mistake(
            "dtypes mixed in one bucket",
            "a bucket is one flat tensor, so it holds one dtype: keep an open bucket PER "
            "dtype (a dict dtype -> bucket) and close each on its own.",
            _is("mixed"),
        ),
        Mistake(
            "one limit sequence for every dtype",
            "each dtype walks the limits on its own: its first bucket gets "
            "bucket_size_limits[0] even when another dtype's buckets closed before.",
            _is("shared_limits"),
        ),
        Mistake(
            "the crossing parameter started the next bucket",
            "you closed a bucket BEFORE the parameter that would take it over the limit, "
            "and started the next bucket with it: torch adds the parameter first and closes "
            "the bucket once it holds >= the limit — the parameter that crosses stays in.",
            _is("crossing_next"),
        ),
        Mistake(
            "counted elements, not bytes",
            "the limits are in BYTES: a parameter takes numels[i] * dtypes[i].itemsize of "
            "them (4 per float32 element, 8 per float64, 2 per float16), not numels[i].",
            _is("elements"),
        ),
        Mistake(
            "open buckets dropped",
            "the buckets still open when the walk ends are buckets too (their gradients must "
            "be all-reduced as well): after every closed bucket, add each dtype's open one.",
            _is("drop_open"),
        ),
        Mistake(
            "sorted by first parameter",
            "the right buckets, sorted by their first parameter in the walk — but DDP keeps "
            "its rebuilt buckets in the order they CLOSE (torch sorts only when called "
            "without tensor_indices), with the still-open ones after them.",
            _is("sorted_order"),
        ),
        Mistake(
            "buckets in another order",
            "the right buckets, in another order: list them in the order they close, then the "
            "buckets still open at the end (the dtype that first appeared last in the walk "
            "first); inside a bucket keep the walk order (last parameter first).",
            _reordered,
        ),
    ),
)
