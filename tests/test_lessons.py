"""Every lesson runs in fast mode and its own checks pass.

Run: ``pytest tests/test_lessons.py`` (every lesson as a script, about 2 minutes on 2 cores)
and ``pytest -m notebook tests/test_lessons.py`` (every lesson as a notebook, about 2).

The lessons start when collection ends (``MINIDP_LESSON_FAST=1``), one at a time beside
the rest of the suite and two at a time once their tests come up, last
(``lesson_runs.py``), in one of two forms: as a subprocess exactly as a learner runs it
(``python lessons/NN_name.py``), or as a notebook (jupytext converts the ``# %%`` cells,
nbclient executes them in a Jupyter kernel: ``tests/scripts/run_notebook.py``); each
test then waits for its own run. A lesson passes
when it exits 0 and prints "All N checks passed." — its checks assert, so a failing
comparison with torch fails the lesson.

The README's test command runs the script form: the same cells and checks as the notebook,
once. The notebook form (marked ``notebook``) adds only the Jupyter kernel around them (no
``__file__``, ranks that find their function through ``kit``), so ``.ci/run`` runs it as a
second command rather than every test run paying for each lesson twice.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from lesson_runs import LESSONS_DIR, LessonRuns

LESSONS = sorted(p.name for p in LESSONS_DIR.glob("[0-9][0-9]_*.py"))
NOTEBOOK_RUNNER = Path(__file__).resolve().parent / "scripts" / "run_notebook.py"
RUNS = pytest.StashKey[LessonRuns]()
PARALLEL = 2  # the machine has 2 cores; multi-rank lessons start their own processes


def start_runs(session: pytest.Session, first: dict | None = None) -> LessonRuns | None:
    """Start the selected lessons (conftest, when collection ends), after the jobs ``first``
    (other tests' subprocess runs, same form), one at a time for now: the rest of the suite
    runs beside them. ``-k 08_`` starts one lesson, not all."""
    wanted = {
        (item.callspec.params["how"], item.callspec.params["name"])
        for item in session.items
        if item.originalname == "test_lesson_runs_and_checks_pass"
    }
    if not wanted and not first:
        return None
    # the longest lessons first, so the runs do not end waiting on one
    order = sorted(LESSONS, key=lambda name: not name.startswith(("17", "05", "10", "06")))
    argv = {
        "script": lambda name: [sys.executable, name],
        # jupytext converts the # %% cells, nbclient runs them in a Jupyter kernel
        "notebook": lambda name: [sys.executable, str(NOTEBOOK_RUNNER), name],
    }
    jobs = dict(first or {})
    jobs |= {(h, n): argv[h](n) for h in argv for n in order if (h, n) in wanted}
    runs = LessonRuns(jobs)
    runs.widen(1)
    session.config.stash[RUNS] = runs
    return runs


@pytest.fixture(scope="module")
def lesson_runs(request) -> LessonRuns:
    """The runs started at collection; the lesson tests run last, so from here on nothing
    else competes for the cores: two lessons at a time."""
    runs = request.config.stash[RUNS]
    runs.widen(PARALLEL)
    return runs


def test_every_lesson_is_here():
    numbers = [int(name[:2]) for name in LESSONS]
    assert numbers == list(range(1, len(LESSONS) + 1)), f"lessons are not numbered 1..N: {LESSONS}"
    readme = (LESSONS_DIR / "README.md").read_text()
    for name in LESSONS:
        assert name in readme, f"{name} is missing from lessons/README.md"


@pytest.mark.parametrize("how", ["script", pytest.param("notebook", marks=pytest.mark.notebook)])
@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_and_checks_pass(lesson_runs, name, how):
    rc, out, seconds = lesson_runs.result((how, name))
    assert rc == 0, f"{name} ({how}) exited {rc} after {seconds:.1f}s:\n{out[-4000:]}"
    assert "[fast mode]" in out
    done = re.search(r"All (\d+) checks passed\.", out)
    assert done and int(done.group(1)) >= 3, f"{name}: no final check summary:\n{out[-2000:]}"
    checks = [line for line in out.splitlines() if line.startswith("CHECK ")]
    assert len(checks) == int(done.group(1))
    assert not [c for c in checks if c.endswith(": NO") or "NOT equal" in c]


def test_lesson_cells_are_notebook_cells():
    for name in LESSONS:
        text = (LESSONS_DIR / name).read_text()
        assert text.startswith("# %% [markdown]\n# # Lesson"), name
        assert text.count("# %%") >= 4, name
        assert "Run: `python lessons/" in text, name
