"""Exercise (lesson 37): HSDP's gradient reduction on a 2-D mesh (replicate × shard).

The world's ``W = R * S`` ranks form a grid, row-major like ``init_device_mesh((R, S))``:
each row is a *shard* group (S ranks that split the parameters), each column a
*replicate* group (R ranks holding the same shard). ``hsdp_reduce(grad, shard_group,
replicate_group)`` gets this rank's full local gradient and returns its shard — its
``torch.chunk(S)`` rows of dim 0, at index ``shard_group.rank()`` — of the gradient
averaged over **all** W ranks, in HSDP's two steps: reduce-scatter within the shard group
(each rank then holds 1/S of the gradient), then all-reduce that piece across the
replicate group, and divide by W.

The torch component: gloo's ``all_reduce`` (SUM) of the full gradient on the whole world,
divided by W, ``torch.chunk(S)[shard rank]`` (empty when the chunks run out), on the
judge's thread ranks. Inputs are ``inputs.values`` (fractions, large and small magnitudes,
both signs, negative zero), so every sum is exact in any order: where W is a power of two
every division is exact too and answers must be ``torch.equal`` (2×2: each sum has one
addition per step); otherwise the learner may divide in steps (``op="avg"`` twice) or
before summing, which rounds differently, so ``assert_close`` with a tolerance of a few
ulps of the dtype (every classic mistake is off by a factor of 2 or more).

The groups: thread ranks share one gloo group, so rows and columns are
:class:`MeshGroup` views of it (``rank``, ``size``, ``send``, ``recv`` in their own ranks:
what minidp's collectives use), sending through the learner's group of the call
(``learner_group.py``: both ends compared, bytes counted). Two ranks share at most one row
or column, so the groups' messages never meet. Right values moved wastefully (the whole
gradient all-reduced in a group) fail on the byte budget; the reference solution is not
available to the sandbox (reading ``lessons/solutions/`` is tampering).

Run: ``python -m minidp exercise check hsdp_reduce``;
test: ``pytest tests/test_exercise_set_a.py -k hsdp``
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from minidp.tools.exercise import reference
from minidp.tools.exercise.hsdp_slips import (
    TOLS,
    _answer_is,
    _chunk,
    _full,
    _padded_piece,
    _row_only,
    _scaled,
    _split_rows,
    _swapped,
)
from minidp.tools.exercise.inputs import values
from minidp.tools.exercise.mesh_group import MeshGroup, mesh, row_and_column
from minidp.tools.exercise.spec import (
    Answer,
    Case,
    Exercise,
    Expected,
    Mistake,
    Traffic,
)

DTYPES = ("float32", "float64", "bfloat16", "float16")
CASES = (
    {"world": 1, "replicate": 1, "shape": (3, 2), "dtype": "float32", "seed": 0},
    {"world": 2, "replicate": 1, "shape": (4, 2), "dtype": "float32", "seed": 1},
    {"world": 2, "replicate": 2, "shape": (3,), "dtype": "float64", "seed": 2},
    {"world": 4, "replicate": 2, "shape": (4, 3), "dtype": "float32", "seed": 3},
    {"world": 4, "replicate": 2, "shape": (5, 2), "dtype": "bfloat16", "seed": 4},
    {"world": 3, "replicate": 1, "shape": (2, 2), "dtype": "float64", "seed": 5},
    {"world": 6, "replicate": 2, "shape": (7, 2), "dtype": "float32", "seed": 6},
    {"world": 6, "replicate": 3, "shape": (4,), "dtype": "float16", "seed": 7},
)


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


def _learn(fn, case, rank, world, group) -> Answer:
    r, s = mesh(case)
    shard_ranks, replicate_ranks = row_and_column(rank, r, s)
    shard_group = MeshGroup(shard_ranks, rank, "shard")
    replicate_group = MeshGroup(replicate_ranks, rank, "replicate")
    return Answer(fn(values(case, rank), shard_group, replicate_group))


def _expect(case, rank, world, group) -> Expected:
    r, s = mesh(case)
    grads = [values(case, g) for g in range(world)]  # every rank's, to judge mistakes
    total = reference.all_reduce(grads[rank].clone(), group)  # gloo SUM over the whole world
    expected = _chunk(total / world, s, rank % s)
    return Expected(expected, {"grads": grads, "input": grads[rank]})


def _hsdp_cases():
    from hypothesis import strategies as st

    def build(r, s, rows, cols, dtype, seed):
        shape = (rows,) if cols == 0 else (rows, cols)
        return {"world": r * s, "replicate": r, "shape": shape, "dtype": dtype, "seed": seed}

    return st.builds(build, st.integers(1, 3), st.integers(1, 3), st.integers(1, 7),
                     st.integers(0, 3), st.sampled_from(DTYPES), st.integers(0, 99))  # fmt: skip


def _shrink(case: Case) -> Iterable[Case]:
    r, s = mesh(case)
    for r2, s2 in ((r - 1, s), (r, s - 1)):
        if r2 >= 1 and s2 >= 1:
            yield {**case, "world": r2 * s2, "replicate": r2}
    shape = tuple(case["shape"])
    for i, n in enumerate(shape):
        for smaller in sorted({1, n // 2, n - 1}):
            if 1 <= smaller < n:
                yield {**case, "shape": shape[:i] + (smaller,) + shape[i + 1 :]}
    if len(shape) > 1:
        yield {**case, "shape": shape[:1]}
    if case["dtype"] != "float64":
        yield {**case, "dtype": "float64"}
    if case["seed"]:
        yield {**case, "seed": 0}


def _bounds(case: Case, world: int) -> list[tuple[int, int]]:
    """HSDP's bytes per rank. At most: the reduce-scatter's S-1 padded pieces (ceil(rows/S)
    rows each), then one piece all-reduced across R ranks (minidp: one exchange, R-1
    pieces; or the ring's 2(R-1) chunks of ceil(piece/R)). At least: S-1 pieces of
    floor(rows/S) rows, then (R-1)/R of a piece."""
    r, s = mesh(case)
    shape = tuple(case["shape"])
    cols = int(torch.Size(shape[1:]).numel())
    n, floor = -(-shape[0] // s) * cols, shape[0] // s * cols  # elements in a piece
    size = torch.empty(0, dtype=getattr(torch, case["dtype"])).element_size()
    most = ((s - 1) * n + max((r - 1) * n, 2 * (r - 1) * -(-n // r))) * size
    least = ((s - 1) * floor + (r - 1) * floor // r) * size
    return [(least, most)] * world


HSDP_REDUCE = Exercise(
    name="hsdp_reduce",
    lesson="37_hsdp",
    summary="HSDP's gradient: reduce-scatter in the shard group, all-reduce across replicas",
    reference="gloo all_reduce (SUM) on the whole world / W, torch.chunk(S)[shard rank]; "
    "torch.equal when W is a power of two, else a few ulps",
    learn=_learn,
    expect=_expect,
    cases=CASES,
    strategy=_hsdp_cases,
    shrink=_shrink,
    tolerance=lambda case: None if _power_of_two(case["world"]) else TOLS[case["dtype"]],
    traffic=Traffic(
        bounds=_bounds,
        formula="HSDP's share per rank, (S-1) padded pieces + an all-reduce of one piece "
        "across R replicas",
        too_much=Mistake(
            "all-reduced the full gradient",
            "the values are right, but this rank sent far more than HSDP does: reduce-scatter "
            "in the shard group FIRST (each rank keeps 1/S of the gradient), then all-reduce "
            "only that piece across the replicate group — not the whole gradient in either.",
        ),
    ),
    mistakes=(
        Mistake(
            "forgot the replicas",
            "your shard is averaged over your shard group only: the ranks of your replicate "
            "group hold the same shard of *other* batches' gradients. After the "
            "reduce-scatter, all-reduce the piece across replicate_group.",
            _row_only,
        ),
        Mistake(
            "mesh groups swapped",
            "you reduce-scattered across replicate_group and all-reduced in shard_group: the "
            "groups are the other way round. Your row, shard_group, splits the gradient "
            "(reduce-scatter there); your column, replicate_group, holds the same shard of "
            "other batches (all-reduce the piece there).",
            _answer_is(_swapped),
        ),
        Mistake(
            "padding rows left in",
            "you returned the reduce-scatter's whole piece, padding included: keep only the "
            "rows torch.chunk gives your shard — max(min(rows - rank * k, k), 0) of them.",
            _answer_is(_padded_piece),
        ),
        Mistake(
            "tensor_split's rows, not torch.chunk's",
            "your shard has as-even-as-possible rows (tensor_split: 7 rows on 3 ranks are 3, "
            "2, 2), but HSDP shards like torch.chunk: ceil(rows / S) rows each and the rest "
            "on the last (3, 3, 1) — the padding to k = ceil(rows / S) gives that.",
            _answer_is(_split_rows),
        ),
        Mistake(
            "pieces of different sizes",
            "a reduce-scatter needs equal pieces on every rank: pad dim 0 to a multiple of S "
            "(k = ceil(rows / S) rows per piece) before cutting, and cut the padding off after.",
            raised=r"reduce_scatter: input_list\[\d+\] is|reduce_scatter.*(numel|shape)",
        ),
        Mistake(
            "returned the full gradient",
            "each rank returns only its shard: torch.chunk(grad, S) rows at index "
            "shard_group.rank() (reduce-scatter, then cut the padding off).",
            _full,
        ),
        Mistake(
            "forgot to average",
            "every value is W times torch's: reduce-scatter and all-reduce SUM — divide by "
            'the world size W = R * S once (or op="avg" in both steps).',
            _scaled("W"),
        ),
        Mistake(
            "divided by the shard size only",
            "every value is R times torch's: the average is over all W = R * S ranks — "
            "divide by the replicate group's size too.",
            _scaled("R"),
        ),
        Mistake(
            "divided by the replicate size only",
            "every value is S times torch's: the average is over all W = R * S ranks — "
            "divide by the shard group's size too.",
            _scaled("S"),
        ),
        Mistake(
            "averaged twice",
            "every value is torch's divided by W once more: divide by W = R * S once — "
            'op="avg" in each step already divides by that group\'s size.',
            _scaled("1/W"),
        ),
        Mistake(
            "called a collective on a mesh group",
            "the mesh groups give rank, size, send and recv: call minidp.comm's "
            "reduce_scatter(out, pieces, group=shard_group) and all_reduce(piece, "
            "group=replicate_group) — they are built from those.",
            raised=r"RefusedCall: the (shard|replicate) group allows only",
        ),
    ),
)
