"""The exercise checker cannot be fooled: cheats, exits, hangs and bad settings each end in
a failure or an error — never in a pass — and the report says why.

Run: ``pytest tests/test_exercise_guards.py``

The wrong solutions that raise on a rank (collectives instead of send/recv, a receive
buffer of another dtype, an isend never waited for) are in ``test_exercises.py``'s
``WRONG_RAISES``; here: what happens around the learner's function.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch

import minidp.exercise.reference as reference
from minidp.exercise import EXERCISES, check, find, main
from minidp.exercise import report as printer
from minidp.exercise.learner_group import LearnerGroup, PostOffice
from minidp.exercise.process_world import RemoteError
from minidp.exercise.runner import _raised
from minidp.exercise.seal import Seal

WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"
RING = find("ring_all_reduce")


def test_patching_the_reference_fails_and_is_undone():
    """A file that re-points the checker's reference at import cannot pass, and the
    patch does not outlive its check (a test session, a class run in one process)."""
    original = reference.all_reduce
    rep = check(RING, WRONG_DIR / "ring_all_reduce__cheat_patch_reference.py", generated=0)
    assert not rep.passed
    assert "minidp.exercise.reference.all_reduce" in rep.load_error
    assert "changed the checker's or torch's own code while being imported" in rep.load_error
    assert reference.all_reduce is original
    assert printer.status_word(rep) == "cannot import"


def test_patching_during_a_case_fails_the_case(tmp_path):
    bad = tmp_path / "ring_all_reduce.py"
    bad.write_text(
        "import torch\n\n"
        "def ring_all_reduce(tensor, group):\n"
        "    torch.equal = lambda a, b: True  # judged 'equal' from now on\n"
        "    return tensor\n"
    )
    original = torch.equal
    rep = check(RING, bad, generated=0)
    assert torch.equal is original  # put back at once
    assert rep.failure.status == "error" and rep.failure.mistake.name == "changed the checker"
    assert "torch.equal" in printer.summary(rep)


def test_the_seal_sees_a_replaced_method_and_ignores_new_names():
    seal = Seal()
    assert seal.broken() == []
    saved = Seal.broken
    try:
        Seal.broken = lambda self: []  # a class of the checker, re-pointed
        assert "minidp.exercise.seal.Seal.broken" in saved(seal)
    finally:
        Seal.broken = saved
    reference.some_new_name = print  # a name added later is no patch
    try:
        assert seal.broken() == []
    finally:
        del reference.some_new_name


def test_the_learners_group_refuses_collectives_and_checks_both_ends():
    office = PostOffice()
    group = LearnerGroup(object(), office)
    refused = r"allows only rank, size, send, recv .* group\.allreduce"
    with pytest.raises(RuntimeError, match=refused):
        group.allreduce([torch.zeros(1)])
    with pytest.raises(RuntimeError, match="read-only"):
        group.sent_bytes = 0
    office.post("send", 0, 1, 0, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(Exception, match=r"message dtypes differ: rank 0 sends float64, 3 elements"):
        office.post("recv", 0, 1, 0, torch.zeros(3))
    office.post("recv", 1, 0, 5, torch.zeros(2))
    with pytest.raises(Exception, match=r"message sizes differ: .*into float32, 2 elements"):
        office.post("send", 1, 0, 5, torch.zeros(3))
    office.post("send", 1, 0, 6, torch.zeros(0, dtype=torch.int64))
    office.post("recv", 1, 0, 6, torch.zeros(0))  # empty: no bytes, no dtype to disagree on


def test_exit_at_import_is_an_import_error_not_a_pass():
    rep = check(RING, WRONG_DIR / "ring_all_reduce__exit_at_import.py", generated=0)
    assert not rep.passed
    assert "called sys.exit(0) while being imported (line 5: sys.exit(0))" in rep.load_error


def test_a_loop_at_import_ends_at_the_deadline_with_its_line():
    t0 = time.monotonic()
    rep = check(RING, WRONG_DIR / "ring_all_reduce__loop_at_import.py", deadline=1.0)
    elapsed = time.monotonic() - t0
    assert not rep.passed
    assert "did not finish within 1s, still running at line " in rep.load_error
    assert "line 4: while True:" in rep.load_error or "line 5: step += 1" in rep.load_error
    assert elapsed < 6, f"an endless import must end at the deadline, took {elapsed:.1f}s"


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf])
def test_a_deadline_that_is_not_a_positive_number_is_refused(bad):
    with pytest.raises(ValueError, match=r"deadline: expected a positive number of seconds"):
        check(RING, RING.solution, deadline=bad)


@pytest.mark.parametrize("bad", ["0", "-2", "nan", "soon"])
def test_the_command_refuses_a_bad_deadline(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["check", "ring_all_reduce", "--deadline", bad])
    assert exit_.value.code == 2
    assert "expected a positive number of seconds" in capsys.readouterr().err


def test_a_misspelt_name_gets_a_did_you_mean(capsys):
    assert main(["check", "ring_allreduce"]) == 2
    assert "Did you mean 'ring_all_reduce'?" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no exercise 'zzz' — expected one of: scatter"):
        find("zzz")


def test_a_rank_headline_is_not_prefixed_twice():
    headline = RemoteError("MismatchError", "rank 1 raised MismatchError: all_reduce: x", "")
    assert _raised(1, headline) == "rank 1 raised MismatchError: all_reduce: x"
    assert _raised(0, ValueError("oops")) == "rank 0 raised ValueError: oops"


def test_a_difference_names_the_rank_the_item_and_the_element():
    rep = check(
        find("data_parallel_step"),
        WRONG_DIR / "data_parallel_step__averaged_grads.py",
        generated=0,
    )
    assert "first difference: rank 0: item 3 (0.weight's gradient): " in printer.summary(rep)
    assert "most at element [" in printer.summary(rep)


def test_the_generic_hint_says_where_the_inputs_come_from(tmp_path):
    odd = tmp_path / "all_gather.py"  # a wrong answer no classic mistake describes
    odd.write_text(
        "def all_gather(tensor_list, tensor, group):\n"
        "    for t in tensor_list:\n"
        "        t.fill_(5)\n"
    )
    text = printer.summary(check(find("all_gather"), odd, generated=0))
    assert "no classic mistake recognised" in text
    assert "built from the case above by minidp.exercise.comm_metrics._run_all_gather" in text


def test_os_exit_and_a_class_report_as_json(tmp_path, capfd):
    """``check --all --json --dir``: one entry per exercise with its cases. A file whose
    function calls os._exit(0) ends its check process with code 0 — and is an error (no
    verdict), not a pass; the one-exercise command exits 2 for it too."""
    (tmp_path / "ring_all_reduce.py").write_text(RING.solution.read_text())
    exits = (WRONG_DIR / "ring_all_reduce__os_exit.py").read_text()
    (tmp_path / "ring_pass.py").write_text(exits.replace("ring_all_reduce", "ring_pass"))
    rc = main(["check", "--all", "--json", "--dir", str(tmp_path), "--generated", "0"])
    report = json.loads(capfd.readouterr().out)
    assert rc == 2 and report["score"] == 1 and report["of"] == len(EXERCISES)
    entries = {e["exercise"]: e for e in report["exercises"]}
    ring = entries["ring_all_reduce"]
    assert ring["status"] == "pass" and ring["exit"] == 0 and ring["passed"] == ring["cases"] == 9
    assert ring["case results"][0]["case"] == "world=1 shape=(3,) dtype=int64 seed=0"
    ring_pass = entries["ring_pass"]
    assert ring_pass["status"] == "error: no verdict" and ring_pass["exit"] == 2
    assert "ended (exit code 0) before the first case" in ring_pass["report"]
    assert entries["broadcast"]["status"] == "missing"
