"""The exercise checker's guards: what the sandbox refuses and sees, the wire between it and
the judge, the inputs, and everything that ends a check without a pass — exits, loops,
bad settings — each with a report that says why.

Run: ``pytest tests/test_exercise_guards.py``

The eight classic cheats, end to end, are in ``test_exercise_cheats.py``; the wrong
solutions that raise on a rank in ``test_exercises.py``'s ``WRONG_RAISES``.
"""

from __future__ import annotations

import json
import math
import types
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minidp.tools.exercise import EXERCISES, check, find, main, wire
from minidp.tools.exercise import report as printer
from minidp.tools.exercise.forked import RemoteError
from minidp.tools.exercise.guards import _targets
from minidp.tools.exercise.inputs import EXPONENTS, INT_LIMITS, values
from minidp.tools.exercise.learner_group import LearnerGroup, PostOffice
from minidp.tools.exercise.outcome import exit_code
from minidp.tools.exercise.sandbox import raised
from minidp.tools.exercise.seal import Seal

WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"
RING = find("ring_all_reduce")


# ----------------------------------------------------------------------------- the seal


def test_the_seal_sees_a_replaced_method_and_swapped_code_and_ignores_new_names():
    import minidp.tools.exercise.reference as reference
    from minidp.tools.exercise import spec

    seal = Seal()
    assert seal.broken() == []
    saved, code = Seal.broken, spec.same.__code__
    try:
        Seal.broken = lambda self: []  # a class of the checker, re-pointed
        spec.same.__code__ = (lambda a, b: True).__code__  # same name, other code
        changed = saved(seal)
    finally:
        Seal.broken, spec.same.__code__ = saved, code
    assert "minidp.tools.exercise.seal.Seal.broken" in changed
    assert "minidp.tools.exercise.spec.same.__code__" in changed
    reference.some_new_name = print  # a name added later is no patch
    try:
        assert seal.broken() == []
    finally:
        del reference.some_new_name


# ----------------------------------------------------------------------------- the group


def test_the_learners_group_refuses_collectives_checks_both_ends_and_counts():
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
    assert group.traffic() == {"bytes": 0, "messages": 0, "headers": 0}


# ----------------------------------------------------------------------------- the wire


def test_the_wire_rebuilds_plain_tensors_and_notes_a_subclass():
    class Lying(torch.Tensor):
        pass

    notes: list[str] = []
    x = torch.tensor([1.5, -0.0, 300.0]).as_subclass(Lying)
    data = json.loads(json.dumps(wire.encode([x, {"n": 3}, "s", None, 2.5, object()], notes)))
    got = wire.decode(data)
    assert type(got[0]) is torch.Tensor and torch.equal(got[0], torch.tensor([1.5, -0.0, 300.0]))
    assert got[0][1].item() == 0.0 and math.copysign(1, got[0][1].item()) == -1  # bits kept
    assert got[1] == {"n": 3} and got[2:5] == ["s", None, 2.5]
    assert isinstance(got[5], wire.Opaque) and got[5].type_name == "object" and got[5] != got[5]
    assert len(notes) == 1 and "test_exercise_guards" in notes[0] and "subclass" in notes[0]


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
    big, small = x.abs().max().item(), x[x != 0].abs().min().item()
    assert big / small > 1e4
    lossy = x.to(torch.int8).to(torch.float32)  # the int8 shortcut loses the data
    assert not torch.equal(lossy, x)
    for name, limit in INT_LIMITS.items():
        y = values({"shape": (200,), "dtype": name, "seed": 2}, 1)
        assert int(y.abs().max()) <= limit and int(y.abs().max()) > limit // 8


# ----------------------------------------------------------------------------- answers


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
def test_every_answer_an_exercise_refuses_exists(exercise):
    """A name that no longer resolves (renamed in minidp or torch) would silently stop being
    refused: each must name at least one function or class here."""
    for dotted in exercise.answers:
        found = _targets(dotted)
        assert found, f"{exercise.name}: {dotted} names nothing on this torch/minidp"
        assert all(callable(obj) for _, _, obj in found), dotted
        assert all(isinstance(owner, (types.ModuleType, type)) for owner, _, _ in found)


# ----------------------------------------------------------------------------- no verdict


def test_exit_at_import_is_an_import_error_not_a_pass():
    rep = check(RING, WRONG_DIR / "ring_all_reduce__exit_at_import.py", generated=0)
    assert not rep.passed and exit_code(rep) == 2
    assert "called sys.exit(0) while being imported (line 5: sys.exit(0))" in rep.load_error


def test_a_loop_at_import_ends_at_the_deadline_with_its_line():
    rep = check(RING, WRONG_DIR / "ring_all_reduce__loop_at_import.py", deadline=1.0)
    assert not rep.passed and exit_code(rep) == 2
    assert "did not finish within 1s, still running at line " in rep.load_error
    assert "line 4: while True:" in rep.load_error or "line 5: step += 1" in rep.load_error


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
    assert raised(1, headline) == "rank 1 raised MismatchError: all_reduce: x"
    assert raised(0, ValueError("oops")) == "rank 0 raised ValueError: oops"


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
    assert (
        "built from the case above by minidp.tools.exercise.comm_metrics._learn_all_gather" in text
    )


def test_os_exit_in_the_function_is_no_verdict(tmp_path):
    rep = check(RING, WRONG_DIR / "ring_all_reduce__os_exit.py", generated=0)
    assert exit_code(rep) == 2 and printer.status_word(rep) == "error: no verdict"
    assert "case  1  world=1" in rep.died
    assert "the sandbox ended (exit code 0) during the case without an answer" in rep.died
