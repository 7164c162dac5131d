"""Exercises on point-to-point messages (lessons 6 and 7): the ring pass and the parameter
server's all-reduce.

Inputs are ``inputs.values`` (non-integers, mixed magnitudes and signs, negative zero): any
summation order gives gloo's bits. Both exercises are built from send/recv: minidp's
collectives are unavailable, and each rank's bytes are exactly the algorithm's.

Test: ``pytest tests/test_exercises.py -k "ring_pass or naive"``
"""

from __future__ import annotations

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

# ----------------------------------------------------------------------------- ring pass


def _learn_ring_pass(fn, case, rank, world, group) -> Answer:
    return Answer(fn(values(case, rank), group))


def _expect_ring_pass(case, rank, world, group) -> Expected:
    x = values(case, rank)
    everyone = reference.all_gather(x.clone(), group)  # every rank's tensor, rank order
    return Expected(everyone[(rank + 1) % world], {"all": everyone})


def _from_the_left(rank: int, r: Result) -> bool:
    return same(r.got, r.extra["all"][(rank - 1) % len(r.extra["all"])])


RING_PASS = Exercise(
    name="ring_pass",
    lesson="06_send_recv",
    summary="shift by one: send your tensor to rank-1, return the one from rank+1",
    reference="the right neighbour's tensor from torch.distributed.all_gather (gloo), torch.equal",
    learn=_learn_ring_pass,
    expect=_expect_ring_pass,
    cases=CASES,
    strategy=comm_cases,
    answers=COLLECTIVES,
    traffic=Traffic(
        bounds=exactly(lambda case, world, rank: nbytes(case)),
        formula="one message of the whole tensor to the left neighbour",
        p2p_only=True,
        too_much=Mistake(
            "sent more than one message",
            "the values are right, but a rank sent its tensor more than once: one send to "
            "(rank - 1) % world and one receive from (rank + 1) % world is the whole pass.",
        ),
    ),
    mistakes=(
        LOST_FRACTIONS,
        ROUNDED,
        Mistake(
            "wrong direction",
            "you returned the tensor of rank-1, the *left* neighbour: send to "
            "(rank - 1) % world and receive from (rank + 1) % world.",
            lambda case, results: case["world"] > 2 and everywhere(results, _from_the_left),
        ),
        Mistake(
            "returned your own tensor",
            "every rank returned its own input: receive into a *new* buffer "
            "(torch.empty_like(tensor)) and return that buffer.",
            lambda case, results: (
                case["world"] > 1
                and everywhere(results, lambda rank, r: same(r.got, r.extra["all"][rank]))
            ),
        ),
    ),
)

# ----------------------------------------------------------------------------- parameter server


def _expect_naive(case, rank, world, group) -> Expected:
    x = values(case, rank)
    expected = reference.all_reduce(x.clone(), group)
    everyone = reference.all_gather(x.clone(), group)
    return Expected(expected, {"input": x, "all": everyone})


def _only_rank0(case, results) -> bool:
    right0 = same(results[0].got, results[0].expected)
    others = all(same(r.got, r.extra["input"]) for r in results[1:])
    return len(results) > 1 and right0 and others


def _averaged(rank: int, r: Result) -> bool:
    world = len(r.extra["all"])
    mean = (r.expected.double() / world).to(r.got.dtype)  # integers: truncated, like copy_
    return world > 1 and same(r.got, mean)


def _forgot_root(rank: int, r: Result) -> bool:
    return same(r.got, r.expected - r.extra["all"][0])


NAIVE_ALL_REDUCE = Exercise(
    name="naive_all_reduce",
    lesson="07_parameter_server",
    summary="parameter server: every rank sends to rank 0, which sums and sends back",
    reference="torch.distributed.all_reduce (gloo), torch.equal",
    learn=learn_in_place,
    expect=_expect_naive,
    cases=CASES,
    strategy=comm_cases,
    answers=COLLECTIVES,
    traffic=Traffic(
        bounds=exactly(lambda case, world, rank: (world - 1 if rank == 0 else 1) * nbytes(case)),
        formula="the parameter server's (rank 0: W-1 tensors back; others: one to rank 0)",
        p2p_only=True,
        too_much=Mistake(
            "more than the parameter server sends",
            "the values are right, but a rank sent more than the parameter server does: each "
            "rank sends its tensor to rank 0 once, and rank 0 sends the sum once to each.",
        ),
    ),
    mistakes=(
        IN_PLACE,
        LOST_FRACTIONS,
        ROUNDED,
        Mistake(
            "only rank 0 has the sum",
            "rank 0 is right but the other ranks kept their own input: after summing, rank 0 "
            "must send the sum back to every rank, and each must receive it into `tensor`.",
            _only_rank0,
        ),
        Mistake(
            "averaged instead of summed",
            "every rank holds the sum divided by the world size: all_reduce's default op is "
            "SUM — do not divide (DDP divides the gradients itself, afterwards).",
            lambda case, results: everywhere(results, _averaged),
        ),
        Mistake(
            "rank 0's own value left out",
            "the result misses exactly rank 0's input: start rank 0's sum from its own "
            "tensor, not from zeros or from the first message.",
            lambda case, results: everywhere(results, _forgot_root),
        ),
        UNCHANGED,
    ),
)
