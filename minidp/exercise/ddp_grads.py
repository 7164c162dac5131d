"""Exercises on DDP's gradients (lessons 10, 11, 13), checked against torch DDP itself.

Every case runs on real rank processes (torch DDP wants a full ProcessGroup): each rank
builds the same float64 model twice, trains one copy through
``torch.nn.parallel.DistributedDataParallel`` and hands the other to the learner's
function on the same per-rank data. float64 because from 3 ranks on torch's bucket
layout decides the summation order: the learner's order may differ, which float64 keeps
below 1e-15 relative — the tolerance (rtol 1e-12) is honest and far tighter than any
classic mistake (a factor of W, a missing all-reduce). With 2 ranks every order is exact.

* ``average_gradients``: after ``loss.backward()``, replace every ``.grad`` by its average.
* ``bucketed_ddp``: hooks, buckets last layer first, one all-reduce per full bucket
  started *during* backward (through ``start_all_reduce``, which the checker provides
  so it can see *when* each bucket leaves and when it is waited for), wait at the end.
* ``no_sync_accumulation``: in ``ddp_no_sync.py``, on the same models and data.

Test: ``pytest tests/test_exercises_dp_ddp.py -k "average or bucketed"``
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from minidp.comm import all_reduce
from minidp.ddp.textbook import make_buckets
from minidp.exercise.spec import Exercise, Mistake, Result, everywhere, same

TOL = (1e-12, 1e-15)  # float64; only the summation order may differ (see above)
CASES = (  # world 2 first: the mistakes show from 2 ranks on, and one world starts
    {"world": 2, "seed": 0},
    {"world": 3, "seed": 1},
    {"world": 1, "seed": 2},
)


def ddp_cases(**more):
    """Hypothesis strategy: world 1..3 (the rank processes already up), batch rows 1..8,
    any seed, plus the exercise's own keys (``more``: name -> strategy)."""
    from hypothesis import strategies as st

    keys = {"world": st.integers(1, 3), "seed": st.integers(0, 99), "rows": st.integers(1, 8)}
    return st.fixed_dictionaries({**keys, **more})


def _st():
    from hypothesis import strategies

    return strategies


def warm_ddp(rank: int, world_size: int) -> None:
    """``Exercise.prepare``: the first torch DDP (and optimizer) in a process imports
    ``torch._dynamo`` — seconds, paid before the case clock runs."""
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


# What every exercise here shares: rank processes (torch DDP), the float64 tolerance, a
# warm-up outside the case clock, and no shrinking (the cases are small; a try costs seconds).
ON_RANK_PROCESSES = dict(
    tolerance=lambda case: TOL, processes=True, shrink=lambda case: iter(()), prepare=warm_ddp
)


def _model(case) -> nn.Module:
    """float64 MLP 5 -> 8 -> 8 -> 3, the same on every rank (explicit generator)."""
    g = torch.Generator().manual_seed(500 + case["seed"])
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model.double()


def _data(case, rank: int, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(case["seed"] * 7919 + rank * 101 + step)
    rows = case.get("rows", 6)  # this rank's batch
    return (torch.randn(rows, 5, generator=g, dtype=torch.float64),
            torch.randn(rows, 3, generator=g, dtype=torch.float64))  # fmt: skip


def _loss(model, batch) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def _grads(model: nn.Module) -> list:
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def _scaled(got: list, expected: list, factor: float) -> bool:
    return all(
        isinstance(g, torch.Tensor) and torch.allclose(g, e * factor, rtol=1e-9, atol=1e-12)
        for g, e in zip(got, expected)
    )


# ----------------------------------------------------------------------------- after backward


def _run_average(fn, case, rank, world, group) -> Result:
    theirs, mine = _model(case), _model(case)
    ddp = nn.parallel.DistributedDataParallel(theirs, process_group=group)
    _loss(ddp, _data(case, rank)).backward()  # torch averages inside backward
    _loss(mine, _data(case, rank)).backward()  # plain: this rank's gradients only
    local = _grads(mine)
    fn(mine, group)
    return Result(_grads(mine), _grads(theirs), extra={"local": local})


NOT_DIVIDED = Mistake(
    "forgot to divide by the world size",
    "every gradient is world_size times torch's: the all-reduce SUMS — divide by "
    "group.size() (torch multiplies each gradient by 1/world_size before the sum).",
    lambda case, results: (
        case["world"] > 1
        and everywhere(results, lambda rank, r: _scaled(r.got, r.expected, case["world"]))
    ),
)

AVERAGE_GRADIENTS = Exercise(
    name="average_gradients",
    lesson="10_ddp_from_scratch",
    summary="DDP's job after backward: every .grad becomes its average over the ranks",
    reference="torch.nn.parallel.DistributedDataParallel's gradients (gloo), float64, rtol 1e-12",
    run_rank=_run_average,
    cases=CASES,
    strategy=ddp_cases,
    **ON_RANK_PROCESSES,
    mistakes=(
        NOT_DIVIDED,
        Mistake(
            "gradients unchanged",
            "every rank kept its own gradients: the all-reduce ran on a copy (torch.cat, "
            ".clone(), .reshape of a non-contiguous tensor) and the result never went back "
            "into p.grad — copy it back (p.grad.copy_(...)) or reduce p.grad itself.",
            lambda case, results: (
                case["world"] > 1
                and everywhere(results, lambda rank, r: same(r.got, r.extra["local"]))
            ),
        ),
    ),
)

# ----------------------------------------------------------------------------- buckets, overlap


class _Launcher:
    """``start_all_reduce`` for the learner: sums on a comm thread, records the timeline."""

    def __init__(self, group) -> None:
        self.group = group
        self.pool = ThreadPoolExecutor(max_workers=1)  # one at a time, in launch order
        self.events: list[tuple[str, int]] = []  # ("ready"|"launch"|"wait", numel or index)
        self.lock = threading.Lock()

    def note(self, what: str, value: int) -> None:
        with self.lock:
            self.events.append((what, value))

    def __call__(self, flat: torch.Tensor):
        self.note("launch", flat.numel())
        future = self.pool.submit(all_reduce, flat, "sum", self.group)
        launcher = self

        class Handle:  # like torch's Work / Future: wait() / result() give the sum
            def wait(self):
                launcher.note("wait", 0)
                return future.result()

            result = wait

        return Handle()

    def summary(self) -> tuple[list[int], bool, bool]:
        """(launch sizes, some launch before the last gradient, no wait before it)."""
        last_ready = max(i for i, (what, _) in enumerate(self.events) if what == "ready")
        launches = [i for i, (what, _) in enumerate(self.events) if what == "launch"]
        waits = [i for i, (what, _) in enumerate(self.events) if what == "wait"]
        sizes = [n for what, n in self.events if what == "launch"]
        return sizes, any(i < last_ready for i in launches), all(i > last_ready for i in waits)


def _run_buckets(fn, case, rank, world, group) -> Result:
    theirs, mine = _model(case), _model(case)
    ddp = nn.parallel.DistributedDataParallel(theirs, process_group=group)
    launcher = _Launcher(group)
    params = list(mine.parameters())
    for i, p in enumerate(params):  # registered first: they run before the learner's hooks
        p.register_post_accumulate_grad_hook(lambda p, i=i: launcher.note("ready", i))
    fn(mine, group, case["cap"], launcher)
    got, expected, timeline = [], [], []
    for step in range(2):  # twice: the hooks must re-arm for the next backward
        launcher.events.clear()
        for model in (ddp, mine):
            model.zero_grad(set_to_none=True)
            _loss(model, _data(case, rank, step)).backward()
        sizes, overlapped, waited_late = launcher.summary()
        got += [*_grads(mine), sizes, overlapped, waited_late]
        buckets = make_buckets(params, case["cap"])
        expected += [*_grads(theirs), [sum(p.numel() for p in b) for b in buckets], True, True]
        timeline.append(list(launcher.events))
    launcher.pool.shutdown()
    return Result(got, expected, extra={"timeline": timeline, "n": len(params)})


def _grads_right(r: Result, n: int) -> bool:
    return _scaled(r.got[:n], r.expected[:n], 1.0)


def _flag(index_from_end: int):
    """A detector: gradients and bucket sizes right, one timeline flag False."""
    return lambda case, results: everywhere(
        results,
        lambda rank, r: (
            _grads_right(r, r.extra["n"])
            and r.got[r.extra["n"]] == r.expected[r.extra["n"]]
            and r.got[r.extra["n"] + 3 - index_from_end] is False
        ),
    )


def _grads_times(case):
    """``everywhere`` test: the first step's gradients are world_size times torch's."""
    return lambda rank, r: _scaled(r.got[: r.extra["n"]], r.expected[: r.extra["n"]], case["world"])


BUCKETED_DDP = Exercise(
    name="bucketed_ddp",
    lesson="11_buckets_overlap",
    summary="DDP with hooks: buckets last layer first, all-reduced during backward",
    reference="torch.nn.parallel.DistributedDataParallel's gradients (gloo), float64, rtol 1e-12",
    run_rank=_run_buckets,
    cases=tuple({**c, "cap": 200} for c in CASES),  # 200 bytes: 3 buckets of this MLP
    strategy=lambda: ddp_cases(cap=_st().sampled_from([1, 100, 200, 400, 2**20])),
    **ON_RANK_PROCESSES,
    mistakes=(
        Mistake(
            "all-reduce after backward, no overlap",
            "the gradients are right, but no bucket left before the last gradient was ready: "
            "start a bucket's all-reduce in the hook that completes it, and wait only in the "
            "hook of the very last gradient.",
            _flag(2),
        ),
        Mistake(
            "waited for each bucket at once",
            "you wait on a bucket right after starting it, so backward stalls on every "
            "bucket: keep the handles, and wait for them all only when the last gradient "
            "has arrived.",
            _flag(1),
        ),
        Mistake(
            "forgot to divide by the world size",
            NOT_DIVIDED.hint,
            lambda case, results: case["world"] > 1 and everywhere(results, _grads_times(case)),
        ),
        Mistake(
            "other buckets",
            "the bucket sizes differ: walk the parameters LAST to first (reversed(params)), "
            "add each to the open bucket, and close it as soon as it holds >= bucket_cap_bytes.",
            lambda case, results: everywhere(
                results, lambda rank, r: r.got[r.extra["n"]] != r.expected[r.extra["n"]]
            ),
        ),
    ),
)
