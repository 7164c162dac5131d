"""Exercises on point-to-point messages (lessons 6 and 7): the ring pass and the parameter
server's all-reduce.

Inputs are small integers (``spec.small_ints``): any summation order gives gloo's bits.

Test: ``pytest tests/test_exercises.py -k "ring_pass or naive"``
"""

from __future__ import annotations

from minidp.exercise import reference
from minidp.exercise.comm_ring import CASES, IN_PLACE, UNCHANGED, comm_cases
from minidp.exercise.spec import Exercise, Mistake, Result, everywhere, same, small_ints

# ----------------------------------------------------------------------------- ring pass


def _run_ring_pass(fn, case, rank, world, group) -> Result:
    x = small_ints(case, rank)
    everyone = reference.all_gather(x.clone(), group)  # every rank's tensor, rank order
    got = fn(x.clone(), group)
    return Result(got=got, expected=everyone[(rank - 1) % world], extra={"all": everyone})


def _from_the_right(rank: int, r: Result) -> bool:
    return same(r.got, r.extra["all"][(rank + 1) % len(r.extra["all"])])


RING_PASS = Exercise(
    name="ring_pass",
    lesson="06_send_recv",
    summary="shift by one: send your tensor to rank+1, return the one from rank-1",
    reference="the left neighbour's tensor from torch.distributed.all_gather (gloo), torch.equal",
    run_rank=_run_ring_pass,
    cases=CASES,
    strategy=comm_cases,
    mistakes=(
        Mistake(
            "wrong direction",
            "you returned the tensor of rank+1, the *right* neighbour: send to "
            "(rank + 1) % world and receive from (rank - 1) % world.",
            lambda case, results: case["world"] > 2 and everywhere(results, _from_the_right),
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


def _run_naive(fn, case, rank, world, group) -> Result:
    x = small_ints(case, rank)
    expected = reference.all_reduce(x.clone(), group)
    everyone = reference.all_gather(x.clone(), group)
    mine = x.clone()
    returned = fn(mine, group)
    return Result(mine, expected, extra={"input": x, "all": everyone, "returned": returned})


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
    run_rank=_run_naive,
    cases=CASES,
    strategy=comm_cases,
    mistakes=(
        IN_PLACE,
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
