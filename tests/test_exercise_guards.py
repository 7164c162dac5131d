"""The exercise checker's parts: the wire between the sandbox and the judge, the learner's
group, the inputs, what ends a check without a verdict (an exit, a loop at import, a
crash, bad settings), and the ``python -m minidp exercise`` commands.

Run: ``pytest tests/test_exercise_guards.py``

The classic cheats, end to end: ``test_exercise_cheats.py``.
"""

from __future__ import annotations

import json
import math
import os
import struct
import types
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minidp.tools.exercise import NAMES, check, find, isolate, main, wire
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.guards import targets
from minidp.tools.exercise.inputs import EXPONENTS, INT_LIMITS, values
from minidp.tools.exercise.learner_group import PostOffice, RefusedCall, View, Wire
from minidp.tools.exercise.report import exit_code

BROKEN_DIR = Path(__file__).resolve().parent / "exercise_broken"
RING = find("ring_all_reduce")

# ----------------------------------------------------------------------------- the wire


def test_the_wire_rebuilds_plain_tensors_and_notes_a_subclass():
    class Lying(torch.Tensor):
        pass

    notes: list[str] = []
    x = torch.tensor([1.5, -0.0, 300.0]).as_subclass(Lying)
    data = json.loads(json.dumps(wire.encode([x, {"n": 3}, "s", None, 2.5, object()], notes)))
    got = wire.decode(data)
    assert type(got[0]) is torch.Tensor and torch.equal(got[0], torch.tensor([1.5, -0.0, 300.0]))
    assert math.copysign(1, got[0][1].item()) == -1  # the bits are kept
    assert got[1] == {"n": 3} and got[2:5] == ["s", None, 2.5]
    assert isinstance(got[5], wire.Opaque) and got[5].type_name == "object" and got[5] != got[5]
    assert len(notes) == 1 and "subclass" in notes[0]


@pytest.mark.parametrize(
    "bad",
    [
        {"$tensor": "float32", "shape": [2], "b64": "AAAA"},  # 3 bytes for 8
        {"$tensor": "object", "shape": [1], "b64": ""},  # not a dtype
        {"$tensor": "float32", "shape": [-1], "b64": ""},
        {"__class__": "Lying"},
        {"$dict": {"x": {"$evil": 1}}},
    ],
)
def test_the_wire_refuses_anything_else(bad):
    with pytest.raises(wire.Malformed):
        wire.decode(bad)


@pytest.mark.parametrize("frames,says", [
    ([b"not json"], "sent a malformed answer (not JSON"),
    ([{"kind": "case", "j": 0, "i": 0}], "sent a frame out of order ('case')"),
    ([{"kind": "file", "j": 0}, *[{"kind": "case", "j": 0, "i": 1}] * 2], "order ('case')"),
    ([{"kind": "file", "j": 0}, {"kind": "done"}], "said it was done with 0 of 2 cases"),
])  # fmt: skip
def test_the_judge_calls_a_frame_it_did_not_expect_tampering(frames, says):
    """What reaches the judge's pipe but is no answer in order: a tampering finding, no grade."""
    read_fd, write_fd = os.pipe()
    for frame in frames:  # (bytes: a length and a body that is not JSON)
        body = frame if isinstance(frame, bytes) else json.dumps(frame).encode()
        os.write(write_fd, struct.pack(">I", len(body)) + body)
    os.close(write_fd)
    run = isolate.SandboxRun()
    try:
        assert isolate._read(run, read_fd, files=1, cases=2, deadline=1.0) == "malformed"
    finally:
        os.close(read_fd)
    (finding,) = run.tamper[0]
    assert says in finding and finding.endswith("something wrote into the checker's pipe")


# ----------------------------------------------------------------------------- the group


def test_the_learners_group_refuses_collectives_checks_both_ends_and_counts():
    office = PostOffice()
    group = View(Wire(None, office), [3, 5])
    with pytest.raises(
        RefusedCall, match=r"allows only rank, size, send and recv .* group\.allreduce"
    ):
        group.allreduce([torch.zeros(1)])
    with pytest.raises(RefusedCall, match="read-only"):
        group.sent_bytes = 0
    office.post("send", 0, 1, 0, torch.zeros(3, dtype=torch.float64))
    with pytest.raises(Exception, match=r"message dtypes differ: rank 0 sends float64, 3 elements"):
        office.post("recv", 0, 1, 0, torch.zeros(3))
    office.post("recv", 1, 0, 5, torch.zeros(2))
    with pytest.raises(Exception, match=r"message sizes differ: .*into float32, 2 elements"):
        office.post("send", 1, 0, 5, torch.zeros(3))
    office.post("send", 1, 0, 6, torch.zeros(0, dtype=torch.int64))
    office.post("recv", 1, 0, 6, torch.zeros(0))  # empty: no bytes, no dtype to disagree on
    office.post("send", 2, 0, 0, torch.zeros(4))
    # what went to gloo and found no other end: a case after this one needs a new world
    assert office.unmatched() == [
        "rank 0 sent float64, 3 elements (24 bytes) to rank 1 (nobody received it)",
        "rank 0 posted a receive of float32, 2 elements (8 bytes) from rank 1 (nobody sent it)",
        "rank 2 sent float32, 4 elements (16 bytes) to rank 0 (nobody received it)",
    ]


# ----------------------------------------------------------------------------- inputs


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(EXPONENTS)), st.integers(1, 6), st.integers(0, 50))
def test_float_inputs_sum_exactly_in_any_order_and_not_in_narrower_dtypes(dtype, world, seed):
    case = {"world": world, "shape": (64,), "dtype": dtype, "seed": seed}
    xs = [values(case, r) for r in range(world)]
    exact = sum(x.double() for x in xs)  # float64 holds every one of these sums exactly
    forward, backward = xs[0].clone(), xs[-1].clone()
    for x in xs[1:]:
        forward += x
    for x in reversed(xs[:-1]):
        backward += x
    assert torch.equal(forward.double(), exact) and torch.equal(backward.double(), exact)
    assert bool((xs[0] != xs[0].trunc()).any())  # fractions
    assert bool((xs[0] < 0).any()) and bool((xs[0] > 0).any())  # both signs


def test_inputs_have_negative_zero_and_large_and_small_magnitudes():
    x = values({"shape": (400,), "dtype": "float32", "seed": 1}, 0)
    assert bool(((x == 0) & torch.signbit(x)).any())
    assert x.abs().max().item() / x[x != 0].abs().min().item() > 1e4
    assert not torch.equal(x.to(torch.int8).to(torch.float32), x)  # int8 loses the data
    for name, limit in INT_LIMITS.items():
        y = values({"shape": (200,), "dtype": name, "seed": 2}, 1)
        assert limit // 8 < int(y.abs().max()) <= limit


@pytest.mark.parametrize("name", NAMES)
def test_every_answer_an_exercise_refuses_exists(name):
    """A name that no longer resolves (renamed in minidp or torch) would silently stop being
    refused: each must name at least one function or class here."""
    for dotted in find(name).answers:
        found = targets(dotted)
        assert found and all(callable(obj) for _, _, obj in found), f"{name}: {dotted}"
        assert all(isinstance(owner, (types.ModuleType, type)) for owner, _, _ in found)


# ----------------------------------------------------------------------------- no verdict


def test_exit_at_import_is_an_import_error_not_a_pass():
    rep = check(RING, BROKEN_DIR / "ring_all_reduce__exit_at_import.py", generated=0)
    assert not rep.passed and exit_code(rep) == 2
    assert "called sys.exit(0) while being imported (line 5: sys.exit(0))" in rep.load_error


def test_a_loop_at_import_ends_at_the_deadline_with_its_line():
    rep = check(RING, BROKEN_DIR / "ring_all_reduce__loop_at_import.py", deadline=1.0)
    assert not rep.passed and exit_code(rep) == 2
    assert "did not finish within 1s, still running at line " in rep.load_error
    assert "line 4: while True:" in rep.load_error or "line 5: step += 1" in rep.load_error


def test_os_exit_in_the_function_is_no_verdict():
    rep = check(RING, BROKEN_DIR / "ring_all_reduce__os_exit.py", generated=0)
    assert exit_code(rep) == 2 and printer.status_word(rep) == "error: no verdict"
    assert "case  1  world=1" in rep.died
    assert "the sandbox ended (exit code 0) during the case without an answer" in rep.died


def test_a_dying_sandbox_is_explained_and_earlier_failures_kept(capfd):
    """The sandbox can die under the learner (gloo aborts a process whose rank gets a longer
    message than its buffer; here the function calls os.abort() in the first case with 4
    ranks). The command says why and in which case, exits 2, and still shows the WRONG of
    the earlier cases."""
    path = str(BROKEN_DIR / "ring_all_reduce__aborts_later.py")
    assert main(["check", "ring_all_reduce", "--path", path, "--generated", "0"]) == 2
    out = capfd.readouterr().out
    assert "case  5  world=4 shape=(3, 5)" in out and "ABORTED: the sandbox died" in out
    assert "Before that, these cases had failed:" in out
    assert "case  2  world=2 shape=(4,) dtype=int64 seed=1" in out.split("Before that")[1]


def test_file_problems_are_reported_clearly(tmp_path):
    assert "no file" in check(RING, tmp_path / "missing.py").load_error
    (tmp_path / "nofn.py").write_text("x = 1\n")
    assert "defines no function ring_all_reduce" in check(RING, tmp_path / "nofn.py").load_error
    (tmp_path / "syntax.py").write_text("def ring_all_reduce(:\n")
    assert "could not import" in check(RING, tmp_path / "syntax.py").load_error
    (tmp_path / "raises.py").write_text(
        "def ring_all_reduce(tensor, group):\n    raise ValueError('oops')\n"
    )
    rep = check(RING, tmp_path / "raises.py", generated=0)
    assert rep.failure.status == "error" and exit_code(rep) == 1
    assert "raised ValueError: oops (line 2: raise ValueError('oops'))" in printer.summary(rep)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf])
def test_a_deadline_that_is_not_a_positive_number_is_refused(bad):
    with pytest.raises(ValueError, match=r"deadline: expected a positive number of seconds"):
        check(RING, RING.solution, deadline=bad)


def test_when_no_slip_matches_the_report_says_so_and_shows_expected_and_got(tmp_path):
    odd = tmp_path / "all_gather.py"  # a wrong answer no slip gives
    odd.write_text("def all_gather(tensor_list, tensor, group):\n"
                   "    for t in tensor_list:\n        t.fill_(5)\n")  # fmt: skip
    rep = check(find("all_gather"), odd, generated=0)
    text = printer.summary(rep)
    assert exit_code(rep) == 1 and rep.hint is None and not rep.slips
    assert "none of the known slips (2 in lessons/exercises/slips/all_gather/)" in text
    assert "built from it by minidp.tools.exercise.specs.all_gather.learn" in text
    assert "rank 0 expected:" in text and "rank 0 got:" in text


def test_a_difference_names_the_rank_the_item_and_the_element():
    slip = find("data_parallel_step").slips[0]  # gradients averaged over replicas
    rep = check(find("data_parallel_step"), slip, generated=0)
    assert "first difference: rank 0: item 3 (0.weight's gradient): " in printer.summary(rep)
    assert "most at element [" in printer.summary(rep)


# ----------------------------------------------------------------------------- the commands


def test_cli_list_and_names(capsys):
    assert main(["list", "--names"]) == 0
    assert capsys.readouterr().out.split() == list(NAMES)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["name", "lesson", "what", "you", "write"]
    assert all(name in out for name in NAMES)


def test_cli_check_exit_codes(capfd):
    assert main(["check", "ring_all_reduce"]) == 1
    assert "not implemented yet" in capfd.readouterr().out
    sol = str(RING.solution)
    assert main(["check", "ring_all_reduce", "--path", sol, "--generated", "0"]) == 0
    out = capfd.readouterr().out
    assert "case  1  world=1" in out and out.rstrip().splitlines()[-1].startswith("PASS")
    assert main(["check", "no_such_thing"]) == 2
    assert "no exercise 'no_such_thing'" in capfd.readouterr().err
    assert main(["check", "ring_allreduce"]) == 2
    assert "Did you mean 'ring_all_reduce'?" in capfd.readouterr().err
    for argv in (["check"], ["check", "ring_all_reduce", "--deadline", "0"]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
    err = capfd.readouterr().err
    assert "give an exercise NAME or --all" in err and "expected a positive number" in err


def test_cli_check_all_scores_a_folder(tmp_path, capfd):
    (tmp_path / "ring_all_reduce.py").write_text(RING.solution.read_text())
    rc = main(["check", "--all", "--dir", str(tmp_path), "--generated", "0"])
    out = capfd.readouterr().out
    assert f"score: 1/{len(NAMES)}" in out and rc == 1
    row = next(line for line in out.splitlines() if line.strip().startswith("ring_all_reduce"))
    assert " pass " in row and "cases 10/10" in row
    assert sum(" missing " in line for line in out.splitlines()) == len(NAMES) - 1
