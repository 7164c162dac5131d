"""Exercise ``no_sync_accumulation`` (lesson 13), checked against torch DDP itself.

K micro-batches, ONE all-reduce: the learner's function gets a torch DDP whose comm hook
counts the all-reduces, and must give the gradients of torch DDP used as documented
(``no_sync`` around all but the last micro-batch). Models, data and the float64 tolerance
are ``ddp_grads.py``'s. Both sides need torch DDP: the learner's runs on rank processes
forked in the sandbox, torch's in the judge's reference worker.

Test: ``pytest tests/test_exercises_dp_ddp.py -k no_sync``
"""

from __future__ import annotations

from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from minidp.tools.exercise.ddp_grads import (
    CASES,
    ON_RANK_PROCESSES,
    _data,
    _grads,
    _loss,
    _model,
    _st,
    ddp_cases,
)
from minidp.tools.exercise.spec import Answer, Exercise, Expected, Mistake, everywhere


def _counting_hook(state: dict, bucket):
    state["count"] += 1
    return default_hooks.allreduce_hook(state["group"], bucket)


def _counted_ddp(case, group):
    model = _model(case)
    ddp = nn.parallel.DistributedDataParallel(model, process_group=group)
    state = {"count": 0, "group": group}
    ddp.register_comm_hook(state, _counting_hook)
    return model, ddp, state


def _learn_no_sync(fn, case, rank, world, group) -> Answer:
    micro = [_data(case, rank, step) for step in range(case["micro"])]
    model, ddp, state = _counted_ddp(case, group)
    fn(ddp, micro, _loss)
    return Answer([*_grads(model), state["count"]])


def _expect_no_sync(case, rank, world, group) -> Expected:
    micro = [_data(case, rank, step) for step in range(case["micro"])]
    model, ddp, state = _counted_ddp(case, group)
    with ddp.no_sync():  # torch's documented pattern
        for batch in micro[:-1]:
            _loss(ddp, batch).backward()
    _loss(ddp, micro[-1]).backward()
    return Expected([*_grads(model), state["count"]], {"micro": case["micro"]})


def _synced(count_of):
    return lambda case, results: everywhere(results, lambda rank, r: r.got[-1] == count_of(case))


NO_SYNC_ACCUMULATION = Exercise(
    name="no_sync_accumulation",
    lesson="13_no_sync_accumulation",
    summary="accumulate K micro-batches with ddp.no_sync(): one all-reduce, not K",
    reference="torch DDP used as documented (no_sync around forward+backward of all but the "
    "last micro-batch): its gradients, float64 rtol 1e-12, and its all-reduce count",
    learn=_learn_no_sync,
    expect=_expect_no_sync,
    processes=True,
    cases=tuple({**c, "micro": m} for c, m in zip(CASES, (3, 2, 3))),
    strategy=lambda: ddp_cases(micro=_st().integers(1, 4)),
    **ON_RANK_PROCESSES,
    mistakes=(
        Mistake(
            "no_sync that does not cover the forward",
            "every micro-batch was all-reduced: DDP decides in the FORWARD whether the next "
            "backward syncs, so `with ddp.no_sync():` must wrap the forward and the backward "
            "of every micro-batch but the last.",
            _synced(lambda case: case["micro"]),
        ),
        Mistake(
            "nothing all-reduced",
            "no all-reduce ran at all, so the ranks' gradients differ: the LAST micro-batch "
            "(forward and backward) must run outside no_sync — that backward all-reduces "
            "everything accumulated.",
            _synced(lambda case: 0),
        ),
    ),
)
