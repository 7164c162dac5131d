"""Exercise ``bucketed_ddp`` (lesson 11): DDP's hooks, buckets and overlap, checked against
torch DDP itself.

Hooks, buckets last layer first, one all-reduce per full bucket started *during* backward
(through ``start_all_reduce``, which the checker provides so it can see *when* each bucket
leaves and when it is waited for), wait at the end. Models, data and the float64
tolerance are ``ddp_grads.py``'s; the cases include a bucket that reaches the cap exactly
and ``Branchy`` (hooks out of registration order, a reused layer, a frozen parameter).

The sandbox runs the learner's hooks on thread ranks (``start_all_reduce`` sums with
minidp's all-reduce on a communication thread); the judge's reference worker trains the
same model with torch DDP, and takes the expected bucket sizes from torch's own
``_compute_bucket_assignment_by_size`` (``bucket_assignment.torch_buckets``).

Test: ``pytest tests/test_exercises_dp_ddp.py -k bucketed``
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from minidp.comm import all_reduce
from minidp.tools.exercise.bucket_rule import torch_buckets
from minidp.tools.exercise.ddp_grads import (
    DDP_ANSWERS,
    DIVIDED_TWICE_HINT,
    NOT_DIVIDED,
    ON_RANK_PROCESSES,
    _data,
    _grads,
    _loss,
    _model,
    _scaled,
    _st,
    ddp_cases,
)
from minidp.tools.exercise.spec import Answer, Exercise, Expected, Mistake, Result, everywhere


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


def _learn_buckets(fn, case, rank, world, group) -> Answer:
    mine = _model(case)
    launcher = _Launcher(group)
    params = [p for p in mine.parameters() if p.requires_grad]  # frozen ones: no hooks
    for i, p in enumerate(params):  # registered first: they run before the learner's hooks
        p.register_post_accumulate_grad_hook(lambda p, i=i: launcher.note("ready", i))
    fn(mine, group, case["cap"], launcher)
    got, timeline = [], []
    for step in range(2):  # twice: the hooks must re-arm for the next backward
        launcher.events.clear()
        mine.zero_grad(set_to_none=True)
        _loss(mine, _data(case, rank, step)).backward()
        sizes, overlapped, waited_late = launcher.summary()
        got += [*_grads(mine), sizes, overlapped, waited_late]
        timeline.append(list(launcher.events))
    launcher.pool.shutdown()
    return Answer(got, {"timeline": timeline})


def _bucket_sizes(params: list, cap: int) -> list[int]:
    """torch's buckets (its own assignment function, last parameter first), in elements."""
    numels = [p.numel() for p in params]
    dtypes = [str(p.dtype).replace("torch.", "") for p in params]
    return [sum(numels[i] for i in b) for b in torch_buckets(numels, dtypes, [cap])]


def _expect_buckets(case, rank, world, group) -> Expected:
    theirs = _model(case)
    ddp = nn.parallel.DistributedDataParallel(theirs, process_group=group)
    params = [p for p in theirs.parameters() if p.requires_grad]
    sizes = _bucket_sizes(params, case["cap"])
    expected = []
    for step in range(2):
        ddp.zero_grad(set_to_none=True)
        _loss(ddp, _data(case, rank, step)).backward()
        # overlap needs a second bucket: a single one can leave only with the last gradient
        expected += [*_grads(theirs), sizes, len(sizes) > 1, True]
    names = [f"{name}'s gradient" for name, _ in theirs.named_parameters()]
    past_cap = [sum(p.numel() for p in b) for b in _buckets_past_cap(params, case["cap"])]
    labels = [
        f"step {step + 1}: {what}"
        for step in range(2)
        for what in (
            *names,
            "bucket sizes launched (elements)",
            "a bucket started before the last gradient",
            "no wait before the last gradient",
        )
    ]
    return Expected(expected, {"n": len(names), "past cap": past_cap, "labels": labels})


def _buckets_past_cap(params: list, cap: int) -> list[list]:
    """Buckets closed only when they *exceed* the cap (``>``): a classic slip — torch
    closes a bucket as soon as it holds ``>=`` cap bytes."""
    buckets, open_, size = [], [], 0
    for p in reversed(params):
        open_.append(p)
        size += p.numel() * p.element_size()
        if size > cap:
            buckets.append(open_)
            open_, size = [], 0
    return buckets + ([open_] if open_ else [])


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


def _finished_early(case, results) -> bool:
    """Some wait came before the last gradient was ready, and the gradients are wrong."""

    def early(rank: int, r: Result) -> bool:
        events = r.extra["timeline"][0]  # the first step's
        last_ready = max(i for i, (what, _) in enumerate(events) if what == "ready")
        return any(what == "wait" and i < last_ready for i, (what, _) in enumerate(events))

    return any(
        early(rank, r) and not _grads_right(r, r.extra["n"]) for rank, r in enumerate(results)
    )


def _grads_times(case, factor: float | None = None):
    """``everywhere`` test: the first step's gradients are ``factor`` (default: world_size)
    times torch's."""
    factor = case["world"] if factor is None else factor
    return lambda rank, r: _scaled(r.got[: r.extra["n"]], r.expected[: r.extra["n"]], factor)


BUCKETED_DDP = Exercise(
    name="bucketed_ddp",
    lesson="11_buckets_overlap",
    summary="DDP with hooks: buckets last layer first, all-reduced during backward",
    reference="torch.nn.parallel.DistributedDataParallel's gradients (gloo), float64, rtol 1e-12",
    learn=_learn_buckets,
    expect=_expect_buckets,
    answers=DDP_ANSWERS,
    # the MLP's gradients, last first: 24, 192, 64, 512, 64, 320 bytes. Cap 216: the first
    # bucket reaches the cap exactly (closes at >=); Branchy: hooks fire out of
    # registration order, a layer is used twice, a parameter is frozen
    cases=(
        {"world": 2, "seed": 0, "cap": 216},
        {"world": 3, "seed": 1, "cap": 200, "model": "branchy"},
        {"world": 1, "seed": 2, "cap": 200},
    ),
    strategy=lambda: ddp_cases(
        cap=_st().sampled_from([1, 100, 200, 216, 400, 2**20]),
        model=_st().sampled_from(["mlp", "branchy"]),
    ),
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
            "divided twice",
            DIVIDED_TWICE_HINT,
            lambda case, results: (
                case["world"] > 1 and everywhere(results, _grads_times(case, 1 / case["world"]))
            ),
        ),
        Mistake(
            "hooks on frozen parameters",
            "a parameter with requires_grad=False gets no gradient, so it can have no hook "
            "and belongs in no bucket: build the buckets from "
            "[p for p in model.parameters() if p.requires_grad], as torch DDP does.",
            raised=r"doesn't require gradient",
        ),
        Mistake(
            "bucket closed past the cap",
            "a bucket closes as soon as it holds >= bucket_cap_bytes (torch's rule), not only "
            "when it exceeds the cap: with a cap of 216 bytes, gradients of 24 + 192 bytes "
            "make one full bucket.",
            lambda case, results: everywhere(
                results,
                lambda rank, r: (
                    r.got[r.extra["n"]] == r.extra["past cap"]
                    and r.got[r.extra["n"]] != r.expected[r.extra["n"]]
                ),
            ),
        ),
        Mistake(
            "finished before the last gradient",
            "you waited and copied the sums back in a hook that did not come last: a "
            "parameter's hook order follows the backward graph, not the order parameters "
            "were registered (a branch, a reused layer, a head defined first). Finish when "
            "EVERY bucket has been started — count the gradients, not the hooks.",
            _finished_early,
            # finishing early often meets a gradient not there yet: its .grad is None
            raised=r"'NoneType' object has no attribute",
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
