"""The FSDP exercise (``fsdp_unit``): each classic wrong solution fails with its own hint.

Run: ``pytest tests/test_fsdp_exercise.py``

``tests/test_exercises.py`` runs the reference solution and the untouched stub of every
catalogue entry; this file adds the wrong solutions (``tests/exercise_wrong/fsdp_unit__*``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minidp.tools.exercise import check, find
from minidp.tools.exercise import report as printer

WRONG_DIR = Path(__file__).resolve().parent / "exercise_wrong"

# (file tests/exercise_wrong/fsdp_unit__WHAT.py, the mistake its hint must name)
WRONG = [
    ("not_averaged", "forgot to average"),
    ("full_grads", "returned the full gradients"),
    ("padding_kept", "padding rows left in"),
]


@pytest.mark.parametrize("what,mistake", WRONG, ids=[w for w, _ in WRONG])
def test_wrong_solution_fails_with_its_hint(what, mistake):
    rep = check(find("fsdp_unit"), WRONG_DIR / f"fsdp_unit__{what}.py", generated=0)
    text = printer.summary(rep)
    assert not rep.passed and rep.failure.status == "wrong", text
    assert rep.failure.mistake is not None and rep.failure.mistake.name == mistake, text
    assert f"hint ({mistake}): " in text and "expected" in text and "got" in text
