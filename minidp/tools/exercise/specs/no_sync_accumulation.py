"""``no_sync_accumulation`` (lesson 13): K micro-batches, one all-reduce — a torch DDP whose
comm hook counts all-reduces, vs torch DDP used as documented; on rank processes."""

from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs import ddp


def _counting_hook(state: dict, bucket):
    state["count"] += 1
    return default_hooks.allreduce_hook(state["group"], bucket)


def _run(case, rank, group, train) -> list:
    model = ddp.model(case)
    wrapped = nn.parallel.DistributedDataParallel(model, process_group=group)
    wrapped.register_comm_hook(state := {"count": 0, "group": group}, _counting_hook)
    train(wrapped, [ddp.data(case, rank, step) for step in range(case["micro"])], ddp.loss)
    return [*ddp.grads(model), state["count"]]


def _documented(wrapped, micro, loss) -> None:
    with wrapped.no_sync():  # torch's documented pattern
        for batch in micro[:-1]:
            loss(wrapped, batch).backward()
    loss(wrapped, micro[-1]).backward()


EXERCISE = Exercise(
    reference="torch DDP used as documented (no_sync around forward+backward of all but the "
    "last micro-batch): its gradients, float64 rtol 1e-12, and its all-reduce count",
    learn=lambda fn, case, rank, world, group: _run(case, rank, group, fn),
    expect=lambda case, rank, world, group: Expected(
        _run(case, rank, group, _documented), [*ddp.names(ddp.model(case)), "all-reduces"]),
    cases=tuple({**c, "micro": m} for c, m in zip(ddp.CASES, (3, 2, 3, 2))),
    draw=lambda rng: ddp.draw(rng, micro=lambda r: r.randint(1, 4)), generated=2,
    tolerance=lambda case: ddp.TOL, processes=True, reference_processes=True, prepare=ddp.warm,
    diagnose=2)  # fmt: skip
