"""The DataParallel / DDP exercises' own parts: torch's scatter/gather code on CPU, the rank
processes the checker forks, and every device choice of the DataParallel check.

Run: ``pytest tests/test_exercises_dp_ddp.py``

Every exercise's solution, stub, slips and wrong solutions: ``tests/test_exercises.py``.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.parallel.scatter_gather as torch_sg

from minidp.dp import gather, scatter
from minidp.tools.exercise import check, find
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.ranks import run_ranks, where_in_dump
from minidp.tools.exercise.specs.data_parallel_step import gpu_plan, learn
from minidp.tools.exercise.specs.dp import torch_scatter_gather_on_cpu


def test_torch_scatter_gather_run_on_cpu_and_are_restored():
    """The scatter/gather reference is torch's own container code, leaves swapped only
    while it runs: it agrees with minidp.dp (itself tested against it) and torch is left
    as it was."""
    before = torch_sg.Scatter, torch_sg.Gather
    x = torch.arange(20.0).view(10, 2)
    with torch_scatter_gather_on_cpu():
        theirs = torch_sg.scatter((x, "tag"), [0, 1, 2, 3])
        joined = torch_sg.gather([c * 2 for c in x.chunk(4)], "cpu", 0)
    ours = scatter((x, "tag"), ["cpu"] * 4)
    assert (torch_sg.Scatter, torch_sg.Gather) == before
    assert [len(a[0]) for a in theirs] == [3, 3, 3, 1] and all(a[1] == "tag" for a in theirs)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(theirs, ours))
    assert torch.equal(joined, gather([c * 2 for c in x.chunk(4)], "cpu"))


def _rank_value(rank: int, world: int, scale: float) -> float:
    t = torch.full((2,), float(rank + 1))
    torch.distributed.all_reduce(t)
    return t[0].item() * scale


def _stuck_second(rank: int, world: int, task: int) -> int:
    if task == 1:
        time.sleep(30)
    return task


def test_forked_ranks_run_tasks_in_one_group_and_a_stuck_rank_is_named_by_its_line():
    """The checker's rank processes are forked (torch already imported): a real default
    group for task after task; a task still running at the deadline ends the world, each
    rank reported with the line it is at."""
    runs = run_ranks(_rank_value, 3, [2.0, 3.0], deadline=60.0)
    assert [run.values for run in runs] == [[12.0] * 3, [18.0] * 3]  # (1 + 2 + 3) * scale
    runs = run_ranks(_stuck_second, 2, [0, 1, 2], deadline=1.5)
    assert len(runs) == 2 and runs[0].ok and runs[1].stuck
    lines = {where_in_dump(dump, __file__) for dump in runs[1].stuck.values()}
    assert lines == {"line 49: time.sleep(30)"}


def test_every_device_choice_of_the_data_parallel_check_is_explicit():
    """The judge decides, from the machine, what every case adds: torch's real GPU
    DataParallel on all K GPUs beside the CPU reference, or nothing without CUDA."""
    assert gpu_plan(cuda_available=False, cuda_count=0) == {}
    assert gpu_plan(cuda_available=False, cuda_count=2) == {}  # a CUDA build, no driver
    assert gpu_plan(cuda_available=True, cuda_count=1) == {"cuda": 1}  # a learner's laptop
    assert gpu_plan(cuda_available=True, cuda_count=4) == {"cuda": 4}
    assert find("data_parallel_step").plan is not None


def test_a_case_with_a_gpu_compares_the_learners_answer_twice():
    """On a GPU machine (``cuda=K`` in the case) the sandbox hands the same answer a second
    time, for the comparison with torch's GPU DataParallel; the learner's own devices stay
    the simulated CPU ones either way."""
    import importlib.util

    ex = find("data_parallel_step")
    spec = importlib.util.spec_from_file_location("dp_solution", ex.solution)
    solution = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solution)
    case = dict(ex.cases[0])
    plain = learn(solution.data_parallel_step, case, 0, 1, None)
    twice = learn(solution.data_parallel_step, {**case, "cuda": 1}, 0, 1, None)
    n = len(plain) - 4  # output, loss, rows, the gradients, then the batch
    assert len(twice) == len(plain) + 2 + n
    again = twice[len(plain) - 1 : -1]
    assert all(torch.equal(a, b) for a, b in zip(again, [*plain[:2], *plain[3:-1]]))
    assert all(t.device.type == "cpu" for t in twice[:-1] if isinstance(t, torch.Tensor))


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA: compares with torch's GPU DataParallel"
)
def test_the_data_parallel_check_also_compares_with_torchs_gpu_data_parallel():
    ex = find("data_parallel_step")
    rep = check(ex, ex.solution, generated=0)
    assert rep.passed, printer.summary(rep)
    assert {o.case.get("cuda") for o in rep.outcomes} == {torch.cuda.device_count()}
    assert any("torch's DataParallel on" in label for label in rep.outcomes[0].labels or [])
    wrong = check(ex, ex.slips[0].with_name("averaged_grads.py"), generated=0)
    assert wrong.hint.name == "gradients averaged over replicas", printer.summary(wrong)
