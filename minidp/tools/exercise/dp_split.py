"""Exercises on DataParallel's split (lesson 2): scatter and gather; the whole step: dp_step.py.

DataParallel is one process, so nothing here communicates: every rank of the world checks
its own batch (its own seed), which only multiplies the cases. The references:

* scatter / gather: torch's own ``torch.nn.parallel.scatter_gather`` code. It walks the
  containers in Python and hands each tensor to the autograd Functions ``Scatter`` /
  ``Gather``, which need CUDA; the reference always runs them on CPU — whether or not the
  machine has CUDA — with those two leaves swapped, for the duration of the call, for
  their documented CPU meaning (``Tensor.chunk`` / ``torch.cat``), exactly as lesson 2 and
  ``tests/test_dp_scatter_gather.py`` do. ``torch.equal``. The learner's devices are
  ``["cpu"] * n``, simulated devices, on every machine.

The learner may not call the answer: minidp's and torch's scatter/gather are unavailable
in the sandbox (``answers``).

Test: ``pytest tests/test_exercises_dp_ddp.py -k "scatter or gather"``
"""

from __future__ import annotations

import contextlib
import itertools
import threading

import torch
import torch.nn.parallel.scatter_gather as torch_sg

from minidp.tools.exercise.spec import Answer, Exercise, Expected, Mistake, Result, same

_SWAP = threading.Lock()  # rank threads share torch's module: one swap at a time


class _CpuScatter:  # torch's Scatter.apply(target_gpus, chunk_sizes, dim, tensor) on CPU
    apply = staticmethod(lambda devices, sizes, dim, t: tuple(t.chunk(len(devices), dim)))


class _CpuGather:  # torch's Gather.apply(target_device, dim, *tensors) on CPU
    @staticmethod
    def apply(device, dim, *tensors):
        return torch.cat(tensors, dim)


@contextlib.contextmanager
def torch_scatter_gather_on_cpu():
    """torch's scatter/gather container code, its two CUDA-only leaves run on CPU."""
    with _SWAP:
        saved = torch_sg.Scatter, torch_sg.Gather
        torch_sg.Scatter, torch_sg.Gather = _CpuScatter, _CpuGather
        try:
            yield
        finally:
            torch_sg.Scatter, torch_sg.Gather = saved


def _batch(case, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch: x (B, F) float32 and labels y (B,) in 0..2."""
    g = torch.Generator().manual_seed(case.get("seed", 0) * 1009 + rank)
    rows, features = case["shape"]
    x = torch.randn(rows, features, generator=g).to(getattr(torch, case.get("dtype", "float32")))
    return x, torch.randint(0, 3, (rows,), generator=g)


CASES = (  # batch 10 on 4 devices: 3,3,3,1; batch 5: 2,2,1 (3 devices); batch 3 on 5
    {"world": 1, "shape": (10, 3), "devices": 4, "seed": 0},
    {"world": 2, "shape": (8, 2), "devices": 4, "seed": 1},
    {"world": 3, "shape": (5, 3), "devices": 4, "seed": 2},
    {"world": 1, "shape": (7, 2), "devices": 3, "seed": 3, "dtype": "float16"},
    {"world": 2, "shape": (3, 2), "devices": 5, "seed": 4, "dtype": "int64"},
    {"world": 1, "shape": (6, 1), "devices": 1, "seed": 5},
)


DTYPES = ("float32", "float64", "float16", "bfloat16", "int64")  # scatter/gather: any dtype


def dp_cases():
    """Hypothesis strategy: world 1..3, batch 1..12, 1..4 features, 1..6 devices."""
    from hypothesis import strategies as st

    return st.fixed_dictionaries(
        {
            "world": st.integers(1, 3),
            "shape": st.tuples(st.integers(1, 12), st.integers(1, 4)),
            "devices": st.integers(1, 6),
            "seed": st.integers(0, 99),
            "dtype": st.sampled_from(DTYPES),
        }
    )


def shrink_dp(case):
    """Smaller cases: fewer ranks, fewer rows (not below 1), fewer devices, seed 0."""
    if case["world"] > 1:
        yield {**case, "world": 1}
    rows, features = case["shape"]
    for smaller in sorted({1, rows // 2, rows - 1}):
        if 1 <= smaller < rows:
            yield {**case, "shape": (smaller, features)}
    for d in range(2, case["devices"]):
        yield {**case, "devices": d}
    if case.get("dtype", "float32") != "float32":
        yield {**case, "dtype": "float32"}
    if case["seed"]:
        yield {**case, "seed": 0}


def _any_rank(test):
    """A detector: the answer is wrong on some rank, and looks like ``test`` there."""
    return lambda case, results: any(not same(r.got, r.expected) and test(case, r) for r in results)


# ----------------------------------------------------------------------------- scatter


def _learn_scatter(fn, case, rank, world, group) -> Answer:
    x, y = _batch(case, rank)
    return Answer(fn((x, y, "train"), ["cpu"] * case["devices"]))  # simulated devices


def _expect_scatter(case, rank, world, group) -> Expected:
    x, y = _batch(case, rank)
    with torch_scatter_gather_on_cpu():  # two batched tensors and a plain object
        expected = torch_sg.scatter((x, y, "train"), list(range(case["devices"])))
    return Expected([tuple(e) for e in expected], {"input": x})


def _rows(answer) -> list:
    """Rows of x per device in an answer (None where it is not a tensor)."""
    first = [a[0] if isinstance(a, (list, tuple)) and a else a for a in answer]
    return [len(t) if isinstance(t, torch.Tensor) and t.dim() else None for t in first]


def _rows_like(split):
    return lambda case, r: _rows(r.got) == [len(c) for c in split(r.extra["input"], case)]


SCATTER = Exercise(
    name="scatter",
    lesson="02_scatter_gather",
    summary="cut a batch (and every tensor argument) into one chunk per device",
    reference="torch.nn.parallel.scatter (its code; Scatter = Tensor.chunk on CPU), torch.equal",
    learn=_learn_scatter,
    expect=_expect_scatter,
    answers=("minidp.dp.scatter", "minidp.textbook.dp", "torch.nn.parallel.scatter_gather"),
    cases=CASES,
    strategy=dp_cases,
    shrink=shrink_dp,
    mistakes=(
        Mistake(
            "even split instead of chunk",
            "your chunks are as even as possible (tensor_split), but torch's scatter uses "
            "tensor.chunk(n): every chunk has ceil(B/n) rows and the last one what is left "
            "(batch 10 on 4 devices: 3, 3, 3, 1).",
            _any_rank(_rows_like(lambda x, case: x.tensor_split(case["devices"]))),
        ),
        Mistake(
            "a chunk for every device",
            "a small batch makes fewer chunks than devices (batch 5 on 4 devices: 2, 2, 1): "
            "use only as many devices as tensor.chunk returns chunks — no empty chunks.",
            _any_rank(lambda case, r: len(r.got) == case["devices"] > len(r.expected)),
        ),
        Mistake(
            "plain objects not repeated",
            "every device needs the full argument tuple: tensors are chunked, anything else "
            "(here the string 'train') is passed to every device as it is.",
            _any_rank(lambda case, r: any(len(a) != 3 or a[2] != "train" for a in r.got)),
        ),
    ),
)

# ----------------------------------------------------------------------------- gather


def _outputs(case, rank: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """This rank's batch and what the replicas return for it (chunks along ``dim``)."""
    x, _ = _batch(case, rank)
    if case.get("dim", 0) == 1:
        x = x.T.contiguous()  # (F, B): the batch runs along dim 1
    return x, [c.clone() for c in x.chunk(case["devices"], case.get("dim", 0))]


def _learn_gather(fn, case, rank, world, group) -> Answer:
    return Answer(fn(_outputs(case, rank)[1], "cpu", case.get("dim", 0)))


def _expect_gather(case, rank, world, group) -> Expected:
    x, outputs = _outputs(case, rank)
    with torch_scatter_gather_on_cpu():
        expected = torch_sg.gather(outputs, "cpu", case.get("dim", 0))
    return Expected(expected, {"input": x, "outputs": outputs})


def _reordered(case, r: Result) -> bool:
    outs, dim = r.extra["outputs"], case.get("dim", 0)
    if len(outs) > 6:
        return False
    orders = itertools.permutations(range(len(outs)))
    return any(same(r.got, torch.cat([outs[i] for i in o], dim)) for o in orders)


GATHER_CASES = tuple(
    {**c, "dim": d} for c, d in zip(CASES, (0, 1, 0, 1, 0, 0))
)  # fmt: skip

GATHER = Exercise(
    name="gather",
    lesson="02_scatter_gather",
    summary="concatenate the replicas' outputs, in device order, along dim",
    reference="torch.nn.parallel.gather (its own code, Gather = torch.cat on CPU), torch.equal",
    learn=_learn_gather,
    expect=_expect_gather,
    answers=("minidp.dp.gather", "torch.nn.parallel.scatter_gather"),
    cases=GATHER_CASES,
    strategy=lambda: dp_cases().map(lambda c: {**c, "dim": c["seed"] % 2}),
    shrink=shrink_dp,
    mistakes=(
        Mistake(
            "chunks gathered in the wrong order",
            "every row is there, but the blocks are out of order: output i belongs to device "
            "i and to rows i*ceil(B/n)... of the batch — concatenate them in device order, "
            "not in the order the replicas finished.",
            _any_rank(_reordered),
        ),
        Mistake(
            "concatenated along the wrong dim",
            "the batch dimension here is `dim`, not always 0: torch.cat(outputs, dim=dim).",
            _any_rank(lambda case, r: same(r.got, torch.cat(r.extra["outputs"], 1 - case["dim"]))),
        ),
    ),
)
