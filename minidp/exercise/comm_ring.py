"""Exercises on the ring (lesson 8): the ring all-reduce and its reduce-scatter half.

Every rank's input is small integers (``spec.small_ints``), so the learner may add in any
order and a right answer still equals gloo's bit for bit (``torch.equal``).

Test: ``pytest tests/test_exercises.py -k ring``
"""

from __future__ import annotations

import torch

from minidp.exercise import reference
from minidp.exercise.spec import Budget, Exercise, Mistake, Result, everywhere, same, small_ints

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


# ----------------------------------------------------------------------------- detectors


def _permuted(rank: int, r: Result) -> bool:
    """Every right value is there, but some in the wrong place."""
    got, exp = r.got.reshape(-1), r.expected.reshape(-1)
    return torch.equal(got.sort().values, exp.sort().values)


def _partly_right(results: list[Result]) -> bool:
    """No rank has the whole answer, but together they have every element."""
    right = [(r.got == r.expected).reshape(-1) for r in results]
    union = torch.stack(right).any(0)
    return len(results) > 1 and bool(union.all()) and not any(bool(m.all()) for m in right)


def _unchanged(rank: int, r: Result) -> bool:
    return same(r.got, r.extra["input"])


def _returned_copy(rank: int, r: Result) -> bool:
    returned = r.extra.get("returned")
    return returned is not r.got and same(returned, r.expected) and _unchanged(rank, r)


def _one_piece_too_many(results: list[Result]) -> bool:
    """got - right = one rank's own input at every element: a piece was added twice."""
    if len(results) < 2:
        return False
    inputs = torch.stack([r.extra["input"].reshape(-1).double() for r in results])  # (W, n)
    for r in results:
        extra = r.got.reshape(-1).double() - r.expected.reshape(-1).double()  # (n,)
        if not bool(((inputs == extra) | (extra == 0)).any(0).all()):
            return False
    return True


def simulate_ring(inputs: list[torch.Tensor], gather: str = "copy", extra_steps: int = 0) -> list:
    """The stub's ring (``tensor_split`` chunks, to the right) on every rank's input, in
    float64, with a classic slip: ``gather`` "copy" (right), "add" (the all-gather adds
    what arrives) or "none" (no all-gather); ``extra_steps`` reduce-scatter steps past W-1.
    Returns every rank's final flat tensor — what that slip gives, to recognise it."""
    world = len(inputs)
    flats = [x.reshape(-1).double().clone() for x in inputs]  # (N,) per rank
    chunks = [f.tensor_split(world) for f in flats]  # views into flats
    for s in range(world - 1 + extra_steps):  # send chunk (r - s - 1), receive (r - s - 2)
        sent = [chunks[r][(r - s - 1) % world].clone() for r in range(world)]
        for r in range(world):
            chunks[r][(r - s - 2) % world].add_(sent[(r - 1) % world])
    if gather != "none":
        for s in range(world - 1):  # send chunk (r - s), receive (r - s - 1)
            sent = [chunks[r][(r - s) % world].clone() for r in range(world)]
            for r in range(world):
                target = chunks[r][(r - s - 1) % world]
                if gather == "add":
                    target.add_(sent[(r - 1) % world])
                else:
                    target.copy_(sent[(r - 1) % world])
    return flats


def _is_ring(slip: dict):
    """A detector: every rank's answer is what the ring with ``slip`` gives."""

    def matches(case, results) -> bool:
        if len(results) < 2:
            return False
        wrong = simulate_ring([r.extra["input"] for r in results], **slip)
        return everywhere(
            results,
            lambda rank, r: torch.equal(
                r.got.reshape(-1).double(), wrong[rank].to(r.got.dtype).double()
            ),
        )

    return matches


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


def _chunk_bytes(case, world: int) -> int:
    """Bytes in the largest of the ring's chunks: ceil(N / W) elements."""
    numel = int(torch.Size(case.get("shape", (4,))).numel())
    return -(-numel // world) * torch.empty(0, dtype=getattr(torch, case["dtype"])).element_size()


def _run_all_reduce(fn, case, rank, world, group) -> Result:
    x = small_ints(case, rank)
    expected = reference.all_reduce(x.clone(), group)
    mine = x.clone()
    returned = fn(mine, group)
    return Result(got=mine, expected=expected, extra={"input": x, "returned": returned})


RING_ALL_REDUCE = Exercise(
    name="ring_all_reduce",
    lesson="08_ring_all_reduce",
    summary="textbook ring all-reduce: reduce-scatter loop, then all-gather loop",
    reference="torch.distributed.all_reduce (gloo), torch.equal",
    run_rank=_run_all_reduce,
    cases=CASES,
    strategy=comm_cases,
    budget=Budget(
        limit=lambda case, world: 2 * (world - 1) * _chunk_bytes(case, world),
        formula="the ring's most per rank, 2(W-1) chunks of ceil(N/W) elements",
        mistake=Mistake(
            "whole tensor round the ring",
            "the values are right, but each step sent more than one chunk: a ring sends "
            "2(W-1) chunks of N/W elements per rank — 2(W-1)/W * N in all, the least any "
            "all-reduce can — not the whole tensor each step (that is (W-1) times more).",
        ),
    ),
    mistakes=(
        IN_PLACE,
        UNCHANGED,
        Mistake(
            "the all-gather adds instead of copying",
            "in the all-gather, the chunk that arrives is already the full sum: copy it into "
            "place (chunk.copy_(buffer), or recv straight into the chunk), do not add it to "
            "what you hold there.",
            _is_ring({"gather": "add"}),
        ),
        Mistake(
            "reduce-scatter ran world steps",
            "the reduce-scatter takes world-1 steps, not world: one step more adds a rank's "
            "piece twice.",
            _is_ring({"extra_steps": 1}),
        ),
        Mistake(
            "forgot the all-gather",
            "each rank holds only its own finished chunk (plus partial sums elsewhere): after "
            "the world-1 reduce-scatter steps, run world-1 more steps that pass the finished "
            "chunks round the ring, copying (not adding) what arrives.",
            _is_ring({"gather": "none"}),  # exactly; other variants: _partly_right below
        ),
        Mistake(
            "chunks in the wrong place",
            "every rank has all the right sums, but some chunks sit at the wrong offset: in "
            "the all-gather, receive chunk (rank - step - 1) % world into *that* chunk's "
            "slice, and send the one you finished or received last.",
            lambda case, results: everywhere(results, _permuted),
        ),
        Mistake(
            "forgot the all-gather",
            "each rank holds only its own finished chunk (plus partial sums elsewhere): after "
            "the world-1 reduce-scatter steps, run world-1 more steps that pass the finished "
            "chunks round the ring, copying (not adding) what arrives.",
            lambda case, results: _partly_right(results),
        ),
        Mistake(
            "a piece added twice",
            "some element is too large by exactly one rank's input: the reduce-scatter ran "
            "world steps instead of world-1, or the all-gather *adds* the chunk it receives "
            "instead of copying it.",
            lambda case, results: _one_piece_too_many(results),
        ),
    ),
)


# ----------------------------------------------------------------------------- reduce-scatter


def _run_reduce_scatter(fn, case, rank, world, group) -> Result:
    inputs = [small_ints(case, rank, salt=c) for c in range(world)]  # input_list, rank-local
    expected = reference.reduce_scatter([t.clone() for t in inputs], group)
    output = torch.full_like(inputs[0], 77)  # 77: a value no right answer can hold
    fn(output, [t.clone() for t in inputs], group)
    return Result(got=output, expected=expected, extra={"inputs": inputs})


def _kept_other_chunk(results: list[Result]) -> bool:
    """Every rank holds a finished sum, but of another rank's piece."""
    world = len(results)
    sums = [sum(r.extra["inputs"][c] for r in results) for c in range(world)]  # (world,) sums
    return world > 1 and all(
        any(same(r.got, sums[c]) for c in range(world) if c != rank) and not same(r.got, sums[rank])
        for rank, r in enumerate(results)
    )


REDUCE_SCATTER = Exercise(
    name="reduce_scatter",
    lesson="08_ring_all_reduce",
    summary="reduce-scatter: rank r ends with input_list[r] summed over all ranks",
    reference="torch.distributed.reduce_scatter (gloo; before torch 2.8 one all_reduce per "
    "input), torch.equal",
    run_rank=_run_reduce_scatter,
    cases=CASES,
    strategy=comm_cases,
    mistakes=(
        Mistake(
            "kept the wrong chunk",
            "each rank holds a fully summed chunk, but not its own: rank r must end with "
            "input_list[r] summed. In the ring, send piece (rank - step - 1) % world at step "
            "s, so that the last piece you receive and add is piece `rank`.",
            lambda case, results: _kept_other_chunk(results),
        ),
        Mistake(
            "not reduced",
            "output is just this rank's own input_list[rank]: the other ranks' pieces were "
            "never added. Each step, add the partial sum you receive into your piece.",
            lambda case, results: everywhere(
                results, lambda rank, r: same(r.got, r.extra["inputs"][rank])
            ),
        ),
    ),
)
