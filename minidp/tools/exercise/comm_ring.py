"""Exercises on the ring (lesson 8): the ring all-reduce and its reduce-scatter half.

Every rank's input is ``inputs.values``: non-integers, large and small magnitudes, mixed
signs and negative zero, chosen so that every summation order gives the same bits — the
learner may add in any order and a right answer still equals gloo's (``torch.equal``),
while a sum routed through a narrower dtype does not. The collectives are the exercise:
minidp's own (and its textbook's) are unavailable in the sandbox (``COLLECTIVES``), and
the bytes each rank sends are held to the ring's (``Traffic``).

Test: ``pytest tests/test_exercises.py -k ring``
"""

from __future__ import annotations

import torch

from minidp.tools.exercise import reference
from minidp.tools.exercise.comm_common import (
    CASES,
    COLLECTIVES,
    IN_PLACE,
    LOST_FRACTIONS,
    ROUNDED,
    UNCHANGED,
    comm_cases,
    exactly,
    learn_in_place,
    nbytes,
)
from minidp.tools.exercise.inputs import values
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
    """The stub's ring (``tensor_split`` chunks, to the left) on every rank's input, in
    float64, with a classic slip: ``gather`` "copy" (right), "add" (the all-gather adds
    what arrives) or "none" (no all-gather); ``extra_steps`` reduce-scatter steps past W-1.
    Returns every rank's final flat tensor — what that slip gives, to recognise it."""
    world = len(inputs)
    flats = [x.reshape(-1).double().clone() for x in inputs]  # (N,) per rank
    chunks = [f.tensor_split(world) for f in flats]  # views into flats
    for s in range(world - 1 + extra_steps):  # send chunk (r + s + 1), receive (r + s + 2)
        sent = [chunks[r][(r + s + 1) % world].clone() for r in range(world)]
        for r in range(world):
            chunks[r][(r + s + 2) % world].add_(sent[(r + 1) % world])
    if gather != "none":
        for s in range(world - 1):  # send chunk (r + s), receive (r + s + 1)
            sent = [chunks[r][(r + s) % world].clone() for r in range(world)]
            for r in range(world):
                target = chunks[r][(r + s + 1) % world]
                if gather == "add":
                    target.add_(sent[(r + 1) % world])
                else:
                    target.copy_(sent[(r + 1) % world])
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


def _ring_bounds(case, world: int) -> list[tuple[int, int]]:
    """The ring: each rank sends 2(W-1) chunks of floor(N/W) or ceil(N/W) elements."""
    numel = int(torch.Size(case.get("shape", (4,))).numel())
    least, most = nbytes(case, numel // world), nbytes(case, -(-numel // world))
    return [(2 * (world - 1) * least, 2 * (world - 1) * most)] * world


def _expect_all_reduce(case, rank, world, group) -> Expected:
    x = values(case, rank)
    return Expected(reference.all_reduce(x.clone(), group), {"input": x})


RING_ALL_REDUCE = Exercise(
    name="ring_all_reduce",
    lesson="08_ring_all_reduce",
    summary="textbook ring all-reduce: reduce-scatter loop, then all-gather loop",
    reference="torch.distributed.all_reduce (gloo), torch.equal",
    learn=learn_in_place,
    expect=_expect_all_reduce,
    cases=CASES,
    strategy=comm_cases,
    answers=COLLECTIVES,
    traffic=Traffic(
        bounds=_ring_bounds,
        formula="the ring's share per rank, 2(W-1) chunks of N/W elements",
        p2p_only=True,
        too_much=Mistake(
            "whole tensor round the ring",
            "the values are right, but each step sent more than one chunk: a ring sends "
            "2(W-1) chunks of N/W elements per rank — 2(W-1)/W * N in all, the least any "
            "all-reduce can — not the whole tensor each step (that is (W-1) times more).",
        ),
    ),
    mistakes=(
        IN_PLACE,
        UNCHANGED,
        LOST_FRACTIONS,
        ROUNDED,
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


def _learn_reduce_scatter(fn, case, rank, world, group) -> Answer:
    inputs = [values(case, rank, salt=c) for c in range(world)]  # input_list, rank-local
    output = torch.full_like(inputs[0], 77)  # 77: a value no right answer can hold
    fn(output, inputs, group)
    return Answer(output)


def _expect_reduce_scatter(case, rank, world, group) -> Expected:
    inputs = [values(case, rank, salt=c) for c in range(world)]
    return Expected(
        reference.reduce_scatter([t.clone() for t in inputs], group), {"inputs": inputs}
    )


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
    learn=_learn_reduce_scatter,
    expect=_expect_reduce_scatter,
    cases=CASES,
    strategy=comm_cases,
    answers=COLLECTIVES,
    traffic=Traffic(
        bounds=exactly(lambda case, world, rank: (world - 1) * nbytes(case)),
        formula="the ring's share per rank, W-1 pieces of N elements",
        p2p_only=True,
        too_much=Mistake(
            "pieces sent more than once",
            "the values are right, but a rank sent more than W-1 pieces: each step passes "
            "ONE partial sum to the left neighbour (W-1 steps), not every piece.",
        ),
    ),
    mistakes=(
        LOST_FRACTIONS,
        ROUNDED,
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
