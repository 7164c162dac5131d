"""The DataParallel / DDP exercises: each classic wrong solution fails with its own hint.

Run: ``pytest tests/test_exercises_dp_ddp.py``

Every exercise's reference solution and untouched stub are run by ``tests/test_exercises.py``
(it walks the whole catalogue); this file adds the wrong solutions of the DP/DDP
exercises (``tests/exercise_wrong/NAME__WHAT.py``) and the checker's own parts they rely
on: torch's scatter/gather code on CPU, the rank processes shared between checks, and
the deterministic race of the checkpoint exercise.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.parallel.scatter_gather as torch_sg

from minidp.dp import gather, scatter
from minidp.tools.exercise import check, find
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.dp_split import torch_scatter_gather_on_cpu
from minidp.tools.exercise.dp_step import gpu_plan
from minidp.tools.exercise.forked import run_ranks

WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"

# (exercise, file tests/exercise_wrong/NAME__WHAT.py, the mistake its hint must name)
WRONG = [
    ("scatter", "even_split", "even split instead of chunk"),
    ("scatter", "every_device", "a chunk for every device"),
    ("gather", "reversed", "chunks gathered in the wrong order"),
    ("gather", "dim_zero", "concatenated along the wrong dim"),
    ("data_parallel_step", "mean_of_means", "mean of per-device losses"),
    ("data_parallel_step", "averaged_grads", "gradients averaged over replicas"),
    ("data_parallel_step", "even_split", "even split instead of chunk"),
    ("data_parallel_step", "replica_twice", "a replica counted twice"),
    ("average_gradients", "no_divide", "forgot to divide by the world size"),
    ("average_gradients", "flat_copy", "gradients unchanged"),
    ("bucketed_ddp", "after_backward", "all-reduce after backward, no overlap"),
    ("bucketed_ddp", "no_divide", "forgot to divide by the world size"),
    ("bucketed_ddp", "divide_twice", "divided twice"),
    ("bucketed_ddp", "past_cap", "bucket closed past the cap"),
    ("bucketed_ddp", "first_hook_last", "finished before the last gradient"),
    ("bucketed_ddp", "frozen_hooks", "hooks on frozen parameters"),
    ("distributed_sampler", "no_epoch", "sampler without set_epoch"),
    ("distributed_sampler", "blocks", "contiguous blocks instead of a stride"),
    ("no_sync_accumulation", "backward_only", "no_sync that does not cover the forward"),
    ("no_sync_accumulation", "all_inside", "nothing all-reduced"),
    ("checkpoint", "no_barrier", "checkpoint loaded before the save finished"),
    ("checkpoint", "model_only", "optimizer state not restored"),
]


@pytest.mark.parametrize("name,what,mistake", WRONG, ids=[f"{n}-{w}" for n, w, _ in WRONG])
def test_wrong_solution_fails_with_its_hint(name, what, mistake):
    rep = check(find(name), WRONG_DIR / f"{name}__{what}.py", generated=0)
    text = printer.summary(rep)
    # some slips raise on a rank (a hook on a frozen parameter): the hint comes from the error
    assert not rep.passed and rep.failure.status in ("wrong", "error"), text
    assert rep.failure.mistake is not None and rep.failure.mistake.name == mistake, text
    assert f"hint ({mistake}): " in text
    if rep.failure.status == "wrong":
        assert "expected" in text and "got" in text


def test_wrong_solutions_cover_every_dp_ddp_exercise():
    names = {"scatter", "gather", "data_parallel_step", "average_gradients", "bucketed_ddp"}
    names |= {"distributed_sampler", "no_sync_accumulation", "checkpoint"}
    for name in names:
        assert sum(n == name for n, _, _ in WRONG) >= 2, name
        assert find(name).mistakes  # and the exercise is in the catalogue
    on_disk = {p.stem for p in WRONG_DIR.glob("*.py") if p.stem.split("__")[0] in names}
    assert on_disk == {f"{n}__{w}" for n, w, _ in WRONG}


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


def test_forked_ranks_join_a_real_group_and_a_stuck_rank_is_named_by_its_line():
    """The checker's rank processes are forked (torch already imported): a real default
    group; a rank still running at the deadline is reported with the line it is at."""
    run = run_ranks(_rank_value, 3, (2.0,), deadline=60.0)
    assert run.ok and run.values == [12.0, 12.0, 12.0]  # (1 + 2 + 3) * 2
    stuck = run_ranks(_stuck_rank, 2, (), deadline=1.5, focus=__file__)
    assert stuck.stuck and all("time.sleep(" in where for where in stuck.stuck.values())


def _stuck_rank(rank: int, world: int) -> None:
    import time

    time.sleep(30)


# ----------------------------------------------------------------------------- devices


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
    ex = find("data_parallel_step")
    spec = importlib.util.spec_from_file_location("dp_solution", ex.solution)
    solution = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solution)
    case = dict(ex.cases[0])
    plain = ex.learn(solution.data_parallel_step, case, 0, 1, None).got
    twice = ex.learn(solution.data_parallel_step, {**case, "cuda": 1}, 0, 1, None).got
    n = len(plain) - 3  # output, loss, rows, then one gradient per parameter
    assert len(twice) == len(plain) + 2 + n
    assert all(torch.equal(a, b) for a, b in zip(twice[len(plain) :], [*plain[:2], *plain[3:]]))
    assert all(t.device.type == "cpu" for t in twice if isinstance(t, torch.Tensor))


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA: compares with torch's GPU DataParallel"
)
def test_the_data_parallel_check_also_compares_with_torchs_gpu_data_parallel():
    ex = find("data_parallel_step")
    rep = check(ex, ex.solution, generated=0)
    assert rep.passed, printer.summary(rep)
    assert {o.case.get("cuda") for o in rep.outcomes} == {torch.cuda.device_count()}
    labels = rep.outcomes[0].results[0].extra["labels"]
    assert any("torch's DataParallel on" in label for label in labels)
    wrong = check(ex, WRONG_DIR / "data_parallel_step__averaged_grads.py", generated=0)
    assert wrong.failure.mistake.name == "gradients averaged over replicas", printer.summary(wrong)
