"""The exercise checker, exercise by exercise: the reference solution passes, the untouched
stub says "not implemented yet", and every slip (``lessons/exercises/slips/NAME/``) and
every wrong solution in ``tests/exercise_wrong/`` fails (exit 1) with a hint that names its
own mistake — the slips run on the same failing cases, and the one whose answers match is
named. The wrong solutions are written another way than the slip they must be named as:
a hint comes from the answers, not the code. Also: the checker's own guards name theirs, a
deadlock ends at the deadline naming ranks and lines, and the catalogue is lazy.

Run: ``pytest tests/test_exercises.py`` (the full drawn-case matrix: ``-m slow``). In the
whole suite the exercises' checks are background jobs (``conftest.py``): they mostly wait
on their sandboxes, so they run beside the other tests, and their tests read the results.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from minidp.tools.exercise import NAMES, check, find
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.report import exit_code
from minidp.tools.exercise.runner import check_files
from minidp.tools.exercise.spec import ROOT

WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"

# tests/exercise_wrong/NAME__WHAT.py -> the slip its hint must name (lessons/exercises/slips/
# NAME/SLIP.py): the classes the checker once missed first (a subgroup, shard groups of 4+,
# interleaved dtypes, a mutated input, a rank-0 duty), then more written another way
VARIANTS = {
    "fp16_compress_hook__world_size_from_dist": "default_group_size",
    "hsdp_reduce__rows_left_unclamped": "unclamped_rows",
    "bucket_assignment__reinserted_dtype": "pop_on_close",
    "sync_batchnorm_stats__centres_x": "mutates_input",
    "reduce_scatter__sums_into_inputs": "added_into_inputs",
    "checkpoint__all_ranks_write": "every_rank_saves",
    "checkpoint__plain_load": "no_map_location",
    "hsdp_reduce__front_padding": "padded_in_front",
    "bucket_assignment__cycling_limits": "limits_cycle",
    "clip_grad_norm_shards__returns_limit": "returns_max_norm",
    "no_sync_accumulation__mean_loss": "loss_divided",
    "bucketed_ddp__fire_when_full": "ready_order",
    "zero1_partition__greedy_blocks": "blocks_by_elements",
    "fsdp_unit__tail_rows": "wrong_end",
    "sync_batchnorm_stats__float32": "float32_stats",
    "ring_all_reduce__no_gather_phase": "no_allgather",
    "naive_all_reduce__mean": "averaged",
    "average_gradients__sum_only": "no_divide",
    "distributed_sampler__fixed_seed": "no_epoch",
    "scatter__tensor_split": "even_split",
    "data_parallel_step__mean_grads": "averaged_grads",
}
# tests/exercise_wrong/NAME__WHAT.py -> the mistake the checker's own guard names (it raises)
GUARDED = {
    "ring_all_reduce__float32_buffer": "receive buffer of another dtype",
    "ring_all_reduce__chunk_off_by_one": "message sizes differ",
    "ring_all_reduce__isend_not_waited": "isend never waited for",
    "ring_all_reduce__cheat_group_allreduce": "used a collective the group does not offer",
    "ring_all_reduce__cheat_dist_all_reduce": "used a collective the group does not offer",
    "ring_all_reduce__calls_textbook": "called the answer",
    "hsdp_reduce__group_allreduce": "used a collective the group does not offer",
    "fp16_compress_hook__default_group": "used the default group",
    "average_metric__all_reduce_no_group": "used the default group",
    "sync_batchnorm_stats__default_group": "used the default group",
}
# (file, the line every rank is stuck at, rank 0's counters there): blocking sends
DEADLOCKS = [
    ("ring_pass__blocking_send", 13, "(rank=0, world=2)"),
    ("ring_all_reduce__blocking_send", 14, "(rank=0, world=2, step=0, send_c=1, recv_c=0)"),
]


def test_every_file_in_the_wrong_folder_is_tested():
    on_disk = {p.stem for p in WRONG_DIR.glob("*.py")}
    assert on_disk == set(VARIANTS) | set(GUARDED) | {f for f, _, _ in DEADLOCKS}
    for stem, slip in VARIANTS.items():  # each names a slip that exists, and differs from it
        path = find(stem.split("__")[0]).slips[0].parent / f"{slip}.py"
        assert path.is_file() and path.read_text() != (WRONG_DIR / f"{stem}.py").read_text()


JOBS = 4  # background jobs the exercises are split into (each well inside the runner's limit)
MARK = "exercise results: "  # the line a job prints, then JSON: name -> None or the failure


def background_jobs(items) -> dict[tuple[str, str], list[str]]:
    """The selected exercises' checks, as jobs for the background runner (conftest)."""
    test = "test_solution_passes_stub_is_not_done_and_every_slip_names_itself"
    names = [item.callspec.params["name"] for item in items if item.originalname == test]
    return {("exercises", ",".join(names[i::JOBS])): [sys.executable, __file__, *names[i::JOBS]]
            for i in range(min(JOBS, len(names)))}  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_solution_passes_stub_is_not_done_and_every_slip_names_itself(name, request):
    """One sandbox for the solution, the stub, the slips and the wrong solutions of this
    exercise, with the cases a learner's check runs (fixed and drawn)."""
    from test_lessons import RUNS

    runs = request.config.stash.get(RUNS, None)
    key = next((k for k in (runs.keys() if runs else ()) if k[0] == "exercises"
                and name in k[1].split(",")), None)  # fmt: skip
    if key is None:  # no background runner (one file run alone): check here
        _check(name)
        return
    rc, out, seconds = runs.result(key)
    lines = [line for line in out.splitlines() if line.startswith(MARK)]
    assert rc == 0 and lines, f"the job {key[1]} exited {rc} after {seconds:.0f}s:\n{out[-4000:]}"
    failure = json.loads(lines[-1][len(MARK) :])[name]
    assert failure is None, failure


def _check(name: str) -> None:
    """Every assertion of the test above, for exercise ``name``."""
    ex = find(name)
    wrong = [WRONG_DIR / f"{stem}.py" for stem in VARIANTS if stem.startswith(f"{name}__")]
    files = [ex.solution, ex.stub, *ex.slips, *wrong]
    solution, stub, *rest = check_files(ex, files)
    assert solution.passed, printer.summary(solution)
    worlds = {o.case["world"] for o in solution.outcomes}
    assert {1, 2} <= worlds and worlds & {3, 5}, f"too few world sizes: {worlds}"
    stub_is_todo = stub.failure.status == "todo" and len(stub.outcomes) == 1
    assert stub_is_todo and exit_code(stub) == 1, printer.summary(stub)
    assert "not implemented yet" in printer.summary(stub), printer.summary(stub)
    assert len(ex.slips) >= 2, "two classic mistakes at least, in lessons/exercises/slips/"
    lesson = ex.stub.parents[1] / f"{ex.lesson}.py"
    assert f"exercise check {name}" in lesson.read_text(), f"{lesson} never names its check"
    bad = []
    for path, rep in zip(files[2:], rest):
        slip = ex.slips[0].with_name(f"{VARIANTS.get(path.stem, path.stem)}.py")
        named = rep.hint.source if rep.hint else [h.source for h in rep.slips]
        text = printer.summary(rep)
        if exit_code(rep) != 1 or named != str(slip.relative_to(ROOT)):
            bad.append(f"{path.name}: exit {exit_code(rep)}, named {named}\n{text}")
        elif f"hint ({rep.hint.name}): " not in text or not re.search("expected|raised", text):
            bad.append(f"{path.name}: the report does not show the hint\n{text}")
    assert not bad, "\n\n".join(bad)


def test_the_checkers_own_guards_name_the_mistakes_they_raise():
    for name in sorted({stem.split("__")[0] for stem in GUARDED}):
        stems = [stem for stem in GUARDED if stem.startswith(f"{name}__")]
        reports = check_files(find(name), [WRONG_DIR / f"{s}.py" for s in stems], generated=0)
        for stem, rep in zip(stems, reports):
            text = printer.summary(rep)
            assert exit_code(rep) == 1 and rep.failure.status == "error", text
            assert rep.hint is not None and rep.hint.name == GUARDED[stem], text
            assert f"hint ({GUARDED[stem]}): " in text and "raised" in text


@pytest.mark.parametrize("stem,line,counters", DEADLOCKS)
def test_deadlock_ends_at_the_deadline_naming_ranks_and_line(stem, line, counters):
    rep = check(find(stem.split("__")[0]), WRONG_DIR / f"{stem}.py", deadline=1.5, generated=0)
    assert rep.failure.status == "stuck" and exit_code(rep) == 1
    text = printer.summary(rep)
    assert "did not finish within 1.5s" in text
    assert f"rank 0 still running, at line {line}:" in text and "rank 1 still running" in text
    assert counters in text  # rank 0's loop counters there: which step it is stuck in
    assert "hint (blocking sends)" in text
    assert rep.outcomes[-1].status == "stuck"  # the sandbox stops at the first deadlock


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_solution_passes_many_drawn_cases(name):
    ex = find(name)
    rep = check(ex, ex.solution, generated=4 * ex.generated)
    assert rep.passed, printer.summary(rep)


def test_checking_one_exercise_imports_that_exercise_only():
    code = (
        "import sys; from minidp.tools.exercise import find; find('ring_all_reduce'); "
        "print(sorted(m for m in sys.modules if m.startswith('minidp.tools.exercise.specs.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['minidp.tools.exercise.specs.comm',",
                                  "'minidp.tools.exercise.specs.ring_all_reduce']"]  # fmt: skip


if __name__ == "__main__":  # a background job: check the exercises named, report each
    found = {}
    for name in sys.argv[1:]:
        try:
            _check(name)
            found[name] = None
        except AssertionError as exc:
            found[name] = str(exc) or traceback.format_exc()
    print(MARK + json.dumps(found), flush=True)
