"""The exercise checker: solutions pass, stubs say "not implemented yet", each classic wrong
solution fails with its own hint, a deadlock ends at the deadline naming ranks and lines,
and the ``python -m minidp exercise`` commands work. (Cheats: ``test_exercise_cheats.py``.)

Run: ``pytest tests/test_exercises.py`` (the full generated-case matrix: ``-m slow``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_exercise_set_a import WRONG as SET_A_WRONG
from test_exercise_set_a import WRONG_RAISES as SET_A_RAISES
from test_exercise_set_b import WRONG as SET_B_WRONG
from test_exercise_set_b import WRONG_RAISES as SET_B_RAISES
from test_exercises_dp_ddp import WRONG as DP_DDP_WRONG
from test_fsdp_exercise import WRONG as FSDP_WRONG

from minidp.tools.exercise import EXERCISES, check, find, main
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.runner import GENERATED

WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"

# (exercise, file tests/exercise_wrong/NAME__WHAT.py, the mistake its hint must name)
WRONG = [
    ("ring_pass", "wrong_direction", "wrong direction"),
    ("ring_pass", "returns_own", "returned your own tensor"),
    ("naive_all_reduce", "only_root", "only rank 0 has the sum"),
    ("naive_all_reduce", "averaged", "averaged instead of summed"),
    ("naive_all_reduce", "forgot_root", "rank 0's own value left out"),
    ("ring_all_reduce", "no_allgather", "forgot the all-gather"),
    ("ring_all_reduce", "gather_wrong_chunk", "chunks in the wrong place"),
    ("ring_all_reduce", "gather_adds", "the all-gather adds instead of copying"),
    ("ring_all_reduce", "whole_tensor", "whole tensor round the ring"),
    ("reduce_scatter", "wrong_chunk", "kept the wrong chunk"),
    ("reduce_scatter", "no_reduce", "not reduced"),
    ("all_gather", "by_step", "entries in the wrong order"),
    ("all_gather", "own_missing", "own entry missing"),
    ("broadcast", "ignores_src", "ignored src"),
    ("broadcast", "not_in_place", "not in place"),
    ("average_metric", "mean_of_means", "mean of means"),
    ("average_metric", "local_only", "local mean only"),
    ("zero1_step", "no_broadcast", "no broadcast from the owners"),
    ("zero1_step", "no_divide", "forgot to divide by the world size"),
    ("reduce_scatter_grad", "no_divide", "forgot to divide by the world size"),
    ("reduce_scatter_grad", "wrong_piece", "kept another rank's piece"),
    ("reduce_scatter_grad", "not_freed", "did not free the full gradient"),
    ("reduce_scatter_grad", "divide_twice", "divided twice"),
]
# (exercise, file, the mistake its hint must name): wrong solutions that RAISE on a rank
# (the learner's group refuses collectives, checks both ends of every message and that
# every isend was waited for) — the hint comes from the error
WRONG_RAISES = [
    ("ring_all_reduce", "float32_buffer", "receive buffer of another dtype"),
    ("ring_all_reduce", "chunk_off_by_one", "message sizes differ"),
    ("ring_all_reduce", "isend_not_waited", "isend never waited for"),
    ("ring_all_reduce", "cheat_group_allreduce", "used a collective instead of send/recv"),
    ("ring_all_reduce", "cheat_dist_all_reduce", "used a collective instead of send/recv"),
    ("ring_all_reduce", "calls_textbook", "called the answer"),
]
# (exercise, file, the line every rank is stuck at, rank 0's counters there): blocking
# sends on every rank
DEADLOCKS = [
    ("ring_pass", "blocking_send", 13, "(rank=0, world=2)"),
    ("ring_all_reduce", "blocking_send", 14, "(rank=0, world=2, step=0, send_c=1, recv_c=0)"),
]


def _ids(e):
    return e.name


@pytest.mark.parametrize("exercise", EXERCISES, ids=_ids)
def test_reference_solution_passes(exercise):
    rep = check(exercise, exercise.solution, generated=2)
    assert rep.passed, printer.summary(rep)
    assert len(rep.outcomes) >= len(exercise.cases)
    worlds = {o.case["world"] for o in rep.outcomes}
    assert {1, 2} <= worlds and worlds & {3, 5}, f"{exercise.name}: too few world sizes {worlds}"


@pytest.mark.slow
@pytest.mark.parametrize("exercise", EXERCISES, ids=_ids)
def test_reference_solution_passes_generated_matrix(exercise):
    rep = check(exercise, exercise.solution, generated=GENERATED * 4)
    assert rep.passed, printer.summary(rep)


@pytest.mark.parametrize("exercise", EXERCISES, ids=_ids)
def test_untouched_stub_is_not_implemented_yet(exercise):
    rep = check(exercise)  # default path: the stub in lessons/exercises/
    assert rep.path == exercise.stub and not rep.passed
    assert rep.failure.status == "todo"
    assert "not implemented yet" in printer.summary(rep)
    assert len(rep.outcomes) == 1  # stops at once: nothing more to learn


@pytest.mark.parametrize("exercise", EXERCISES, ids=_ids)
def test_every_exercise_has_wrong_solutions_and_a_lesson(exercise):
    # the DP/DDP, FSDP and newer exercises' wrong solutions, tested in their own files
    others = DP_DDP_WRONG + [("fsdp_unit", what, mistake) for what, mistake in FSDP_WRONG]
    others += SET_A_WRONG + SET_A_RAISES + SET_B_WRONG + SET_B_RAISES
    wrong = [row[0] for row in WRONG + WRONG_RAISES + DEADLOCKS + others]
    assert wrong.count(exercise.name) >= 2, f"{exercise.name}: add 2 wrong solutions to WRONG"
    lesson = Path(exercise.stub).parents[1] / f"{exercise.lesson}.py"
    assert lesson.is_file(), lesson
    assert f"exercise check {exercise.name}" in lesson.read_text()


@pytest.mark.parametrize("name,what,mistake", WRONG, ids=[f"{n}-{w}" for n, w, _ in WRONG])
def test_classic_wrong_solution_fails_with_its_hint(name, what, mistake):
    rep = check(find(name), WRONG_DIR / f"{name}__{what}.py", generated=0)
    text = printer.summary(rep)
    assert not rep.passed and rep.failure.status == "wrong", text
    assert rep.failure.mistake is not None and rep.failure.mistake.name == mistake, text
    assert f"hint ({mistake})" in text and "expected" in text and "got" in text
    # the counterexample is shrunk: no bigger than the first case showing the same mistake
    first = next(o for o in rep.outcomes if o.mistake == rep.failure.mistake)
    assert rep.failure.case["world"] <= first.case["world"]


@pytest.mark.parametrize(
    "name,what,mistake", WRONG_RAISES, ids=[f"{n}-{w}" for n, w, _ in WRONG_RAISES]
)
def test_wrong_solution_that_raises_fails_with_its_hint(name, what, mistake):
    rep = check(find(name), WRONG_DIR / f"{name}__{what}.py", generated=0, deadline=3)
    text = printer.summary(rep)
    assert not rep.passed and rep.failure.status == "error", text
    assert rep.failure.mistake is not None and rep.failure.mistake.name == mistake, text
    assert f"hint ({mistake}): " in text and "raised" in text


@pytest.mark.parametrize("name,what,line,counters", DEADLOCKS)
def test_deadlock_ends_at_the_deadline_naming_ranks_and_line(name, what, line, counters):
    rep = check(find(name), WRONG_DIR / f"{name}__{what}.py", deadline=1.5, generated=0)
    assert rep.failure.status == "stuck"
    text = printer.summary(rep)
    assert "did not finish within 1.5s" in text
    assert f"rank 0 still running, at line {line}:" in text and "rank 1 still running" in text
    assert counters in text  # rank 0's loop counters there: which step it is stuck in
    assert "hint (blocking sends)" in text
    assert rep.outcomes[-1].status == "stuck"  # the sandbox stops at the first deadlock


# ----------------------------------------------------------------------------- learner errors


def test_file_problems_are_reported_clearly(tmp_path):
    ex = find("ring_all_reduce")
    assert "no file" in check(ex, tmp_path / "missing.py").load_error
    (tmp_path / "nofn.py").write_text("x = 1\n")
    assert "defines no function ring_all_reduce" in check(ex, tmp_path / "nofn.py").load_error
    (tmp_path / "syntax.py").write_text("def ring_all_reduce(:\n")
    assert "could not import" in check(ex, tmp_path / "syntax.py").load_error
    (tmp_path / "raises.py").write_text(
        "def ring_all_reduce(tensor, group):\n    raise ValueError('oops')\n"
    )
    rep = check(ex, tmp_path / "raises.py", generated=0)
    assert rep.failure.status == "error"
    assert "raised ValueError: oops (line 2: raise ValueError('oops'))" in printer.summary(rep)


# ----------------------------------------------------------------------------- the CLI


def test_cli_list_and_names(capsys):
    assert main(["list", "--names"]) == 0
    names = capsys.readouterr().out.split()
    assert names == [e.name for e in EXERCISES]
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["name", "lesson", "what", "you", "write"]
    for e in EXERCISES:
        assert e.name in out and e.lesson in out and e.summary in out


def test_cli_check_exit_codes(capfd):
    assert main(["check", "ring_all_reduce"]) == 1
    assert "not implemented yet" in capfd.readouterr().out
    sol = str(find("ring_all_reduce").solution)
    assert main(["check", "ring_all_reduce", "--path", sol, "--generated", "0"]) == 0
    out = capfd.readouterr().out
    assert "case  1  world=1" in out and out.rstrip().splitlines()[-1].startswith("PASS")
    assert main(["check", "no_such_thing"]) == 2
    assert "no exercise 'no_such_thing'" in capfd.readouterr().err
    with pytest.raises(SystemExit):
        main(["check"])  # neither NAME nor --all
    assert "give an exercise NAME or --all" in capfd.readouterr().err


def test_cli_check_all_scores_a_folder(tmp_path, capfd):
    ring = find("ring_all_reduce")
    (tmp_path / "ring_all_reduce.py").write_text(ring.solution.read_text())
    rc = main(["check", "--all", "--dir", str(tmp_path), "--generated", "0"])
    out = capfd.readouterr().out
    assert "ring_all_reduce" in out and f"score: 1/{len(EXERCISES)}" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("ring_all_reduce"))
    assert " pass " in row and "cases 9/9" in row
    assert all(" missing " in line for line in out.splitlines()[1:-2] if line not in (row, ""))
    assert rc == (0 if len(EXERCISES) == 1 else 1)


def test_a_dying_sandbox_is_explained_and_earlier_failures_kept(capfd):
    """The sandbox can die under the learner (gloo aborts a process whose rank gets a
    longer message than its buffer; here the function calls os.abort() in the first case
    with 4 ranks). The command survives, says why and in which case, exits 2 (no verdict
    for every case) — and still shows the WRONG of the earlier cases."""
    path = str(WRONG_DIR / "ring_all_reduce__aborts_later.py")
    assert main(["check", "ring_all_reduce", "--path", path, "--generated", "0"]) == 2
    out = capfd.readouterr().out
    assert "case  5  world=4 shape=(3, 5)" in out  # the case it died in
    assert "ABORTED: the sandbox died" in out
    assert "Before that, these cases had failed:" in out
    assert "case  2  world=2 shape=(4,) dtype=int64 seed=0: WRONG" in out
    assert "hint (tensor unchanged)" in out


@pytest.mark.parametrize(
    "stderr",
    [
        "gloo/transport: 24 vs 16. Received data size doesn't match expected size",  # >= 2.7
        "Enforce fail at gloo/transport: op.preamble.length <= op.nbytes. 24 vs 16",  # 2.4
    ],
)
def test_gloo_size_abort_is_explained_in_every_torchs_wording(stderr):
    from minidp.tools.exercise.isolate import explain

    why = explain(-6, stderr)
    assert "a message of 24 bytes into a receive buffer of 16 bytes" in why
    assert "hint (message sizes differ)" in why
