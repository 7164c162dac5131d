"""What the collective exercises share: their cases, inputs' bytes, traffic bounds, what
is refused as their answer, and the mistakes any of them can make (an integer or narrower
dtype on the way, a copy returned instead of the tensor changed in place).

Test: ``pytest tests/test_exercises.py -k "ring or gather or broadcast or naive"``
"""

from __future__ import annotations

import torch

from minidp.tools.exercise.inputs import values
from minidp.tools.exercise.spec import Answer, Mistake, Result, everywhere, same

DTYPES = ("int64", "float32", "float64", "float16", "bfloat16", "int32", "int8", "uint8")


def comm_cases():
    """Hypothesis strategy: world 1..5, 1-2 dims of 0..6 (so numel < world too), any dtype."""
    from hypothesis import strategies as st

    return st.fixed_dictionaries(
        {
            "world": st.integers(1, 5),
            "shape": st.lists(st.integers(0, 6), min_size=1, max_size=2).map(tuple),
            "dtype": st.sampled_from(DTYPES),
            "seed": st.integers(0, 99),
        }
    )


# world sizes 1..5 (odd ones too), numel < world, 2-D, every dtype, the empty tensor
CASES = (
    {"world": 1, "shape": (3,), "dtype": "int64", "seed": 0},
    {"world": 2, "shape": (4,), "dtype": "int64", "seed": 0},
    {"world": 3, "shape": (6,), "dtype": "float32", "seed": 1},
    {"world": 3, "shape": (2,), "dtype": "int32", "seed": 2},
    {"world": 4, "shape": (3, 5), "dtype": "float64", "seed": 3},
    {"world": 5, "shape": (7,), "dtype": "float16", "seed": 4},
    {"world": 5, "shape": (3,), "dtype": "bfloat16", "seed": 5},
    {"world": 4, "shape": (9,), "dtype": "int8", "seed": 6},
    {"world": 3, "shape": (0,), "dtype": "float32", "seed": 7},
)


# what *is* the answer where the exercise is a collective: every function of these
# modules is unavailable in the sandbox (``guards.refuse_answers``)
COLLECTIVES = (
    "minidp.comm.collectives",
    "minidp.comm.direct",
    "minidp.comm.ring",
    "minidp.comm.naive",
    "minidp.comm.broadcasts",
    "minidp.textbook.collectives",
)


def nbytes(case, numel: int | None = None) -> int:
    """Bytes of ``numel`` elements (default: the case's whole tensor) of the case's dtype."""
    if numel is None:
        numel = int(torch.Size(case.get("shape", (4,))).numel())
    return numel * torch.empty(0, dtype=getattr(torch, case["dtype"])).element_size()


def exactly(per_rank):
    """Traffic bounds: each rank sends exactly ``per_rank(case, world, rank)`` bytes."""
    return lambda case, world: [(n, n) for n in (per_rank(case, world, r) for r in range(world))]


def least_all_reduce(elements: int, element_size: int = 8):
    """Traffic bounds of a tool exercise: an all-reduce of ``elements`` values moves at
    least (W-1)/W of them out of every rank (the ring; the parameter server's leaves and
    the direct exchange send more) — no upper bound."""
    return lambda case, world: [((world - 1) * elements * element_size // world, None)] * world


# ----------------------------------------------------------------------------- detectors


def _unchanged(rank: int, r: Result) -> bool:
    return same(r.got, r.extra["input"])


def _returned_copy(rank: int, r: Result) -> bool:
    returned = r.extra.get("returned")
    fresh = not r.extra.get("returned is tensor", True)
    return fresh and same(returned, r.expected) and _unchanged(rank, r)


def _whole_numbers(rank: int, r: Result) -> bool:
    """The answer holds only whole numbers where the right one has fractions."""
    got, exp = r.got, r.expected
    return (
        isinstance(got, torch.Tensor)
        and got.shape == exp.shape
        and exp.is_floating_point()
        and bool((exp != exp.trunc()).any())
        and (not got.is_floating_point() or bool((got == got.trunc()).all()))
    )


def _rounded(rank: int, r: Result) -> bool:
    """Close to the right answer, but rounded: a narrower dtype on the way."""
    got, exp = r.got, r.expected
    if not (isinstance(got, torch.Tensor) and got.shape == exp.shape and exp.is_floating_point()):
        return False
    g, e = got.double(), exp.double()
    return bool(torch.allclose(g, e, rtol=1e-2, atol=1e-2)) and not torch.equal(g, e)


LOST_FRACTIONS = Mistake(
    "fractions lost on the way",
    "the answer holds whole numbers where the right sums have fractions (1.5, 0.75): "
    "something on the way has an integer dtype — a receive buffer made with "
    "torch.empty(n, dtype=torch.int8) (or int64), or a .to(int) — use torch.empty_like(chunk).",
    lambda case, results: any(
        not same(r.got, r.expected) and _whole_numbers(k, r) for k, r in enumerate(results)
    ),
)
ROUNDED = Mistake(
    "precision lost on the way",
    "the answer is close but rounded: a buffer or a sum in a narrower dtype (float16, "
    "bfloat16, float32 for float64 inputs). Keep every buffer in the tensor's own dtype "
    "(torch.empty_like(chunk)).",
    lambda case, results: any(
        not same(r.got, r.expected) and _rounded(k, r) for k, r in enumerate(results)
    ),
)
IN_PLACE = Mistake(
    "returned a new tensor",
    "the answer must be written into `tensor` itself (in place), like "
    "torch.distributed.all_reduce: use tensor.copy_(result) or in-place ops (+=, add_, "
    "torch.add(..., out=...)) on views of tensor.",
    lambda case, results: everywhere(results, _returned_copy),
)
UNCHANGED = Mistake(
    "tensor unchanged",
    "every rank still holds its own input: nothing was added in. Did the loop run "
    "(range(world - 1)), and do you add the received buffer into your chunk?",
    lambda case, results: case["world"] > 1 and everywhere(results, _unchanged),
)


def learn_in_place(fn, case, rank, world, group) -> Answer:
    """The learner's ``fn(tensor, group)`` on this rank's input: the tensor afterwards, and
    what was returned (was it the tensor itself?)."""
    mine = values(case, rank)
    returned = fn(mine, group)
    return Answer(mine, {"returned": returned, "returned is tensor": returned is mine})
