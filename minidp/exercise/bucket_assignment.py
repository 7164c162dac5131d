"""Exercise ``bucket_assignment`` (lesson 11): which gradients DDP puts in which bucket.

The learner gets every parameter's ``numel`` and ``dtype`` in registration order
(``model.parameters()``) and the bucket size limits ``[first_cap, cap]`` in bytes, and
returns the buckets as lists of parameter indices. The rule, torch's
``torch.distributed._compute_bucket_assignment_by_size`` (C++, ``reducer.cpp``):

* walk the parameters LAST to first (the order their gradients become ready in a plain
  stack of layers; DDP's bucket rebuild walks the order it saw in backward);
* one open bucket per dtype (and device); add the parameter's bytes, and close the
  bucket as soon as it holds ``>=`` the current limit (the parameter that crosses the cap
  stays in);
* each dtype walks the limits on its own: its first bucket is held to ``limits[0]``
  (DDP's small 1 MiB first bucket), the next to ``limits[1]``, ...; the last repeats;
* still-open buckets are kept at the end; buckets are ordered by their first parameter in
  the walk, indices inside a bucket in walk order.

Reference: torch's function on ``numel``-sized tensors on the ``meta`` device (no memory)
in walk order, its positions mapped back to registration indices. It is private: where a
torch lacks it, the checker's own port below (``_walk``, the same rule, also the source of
the classic mistakes' answers) is the reference; ``tests/test_exercise_set_b.py`` holds
them equal on every fixed case. A pure function: every thread rank computes the same
buckets (DDP does so on every rank, and the ranks must agree). Lists of ints: exact.

Test: ``pytest tests/test_exercise_set_b.py -k bucket``
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minidp.exercise.spec import Answer, Exercise, Expected, Mistake, Result, everywhere

MIB = 1024 * 1024
DTYPES = ("float32", "float64", "float16", "bfloat16")
SLIPS = ("forward", "past_cap", "one_cap", "mixed", "shared_limits")  # _walk's flags


def _walk(
    numels: list[int],
    dtypes: list[str],
    limits: list[int],
    *,
    forward: bool = False,
    past_cap: bool = False,
    one_cap: bool = False,
    mixed: bool = False,
    shared_limits: bool = False,
) -> list[list[int]]:
    """torch's rule in plain Python; each flag is one classic slip (for the mistakes)."""
    order = list(range(len(numels))) if forward else list(reversed(range(len(numels))))
    open_: dict[str, list] = {}  # key -> [indices, bytes]
    step: dict[str, int] = {}  # key -> position in limits
    closed: list[list[int]] = []
    for i in order:
        key = "any" if mixed else dtypes[i]
        limit_key = "any" if shared_limits else key
        bucket = open_.setdefault(key, [[], 0])
        pos = step.setdefault(limit_key, 0)
        bucket[0].append(i)
        bucket[1] += numels[i] * getattr(torch, dtypes[i]).itemsize
        cap = limits[-1] if one_cap else limits[pos]
        if bucket[1] > cap if past_cap else bucket[1] >= cap:
            closed.append(bucket[0])
            open_[key] = [[], 0]
            step[limit_key] = min(pos + 1, len(limits) - 1)
    buckets = closed + [b[0] for b in open_.values() if b[0]]
    where = {i: n for n, i in enumerate(order)}
    return sorted(buckets, key=lambda b: where[b[0]])


def torch_buckets(numels: list[int], dtypes: list[str], limits: list[int]) -> list[list[int]]:
    """torch's own assignment (private function; the port where a torch lacks it)."""
    compute = getattr(dist, "_compute_bucket_assignment_by_size", None)
    if compute is None:
        return _walk(numels, dtypes, limits)
    last = len(numels) - 1
    walk = [
        torch.empty(numels[i], dtype=getattr(torch, dtypes[i]), device="meta")
        for i in reversed(range(len(numels)))
    ]
    buckets = compute(walk, limits)[0]  # sorted by their smallest walk position
    return [[last - j for j in bucket] for bucket in buckets]


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
    """Which slip's buckets this answer is: exactly first, then as sets (a wrong answer
    may list its buckets in another order), among the slips that are wrong here."""
    right = _canonical(r.expected)
    wrong = [s for s in SLIPS if _canonical(r.extra[s]) != right]
    exact = [s for s in wrong if r.got == r.extra[s]]
    loose = [s for s in wrong if _canonical(r.got) == _canonical(r.extra[s])]
    return (exact or loose or [None])[0]


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
    summary="DDP's buckets: last parameter first, per dtype, close at >= cap, small first cap",
    reference="torch.distributed._compute_bucket_assignment_by_size, the same buckets",
    learn=_learn,
    expect=_expect,
    answers=(
        "torch.distributed._compute_bucket_assignment_by_size",
        "minidp.ddp.buckets",
        "minidp.ddp.textbook",
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
            "buckets in another order",
            "the right buckets, in another order: list them by the position of their first "
            "parameter in the walk (still-open buckets included), and inside a bucket keep "
            "the walk order (last parameter first).",
            _reordered,
        ),
    ),
)
