"""Every lesson runs in fast mode and its own checks pass.

Run: ``pytest tests/test_lessons.py`` (every lesson as a script, about 2 minutes on 2 cores)
and ``pytest -m notebook tests/test_lessons.py`` (every lesson as a notebook, about 2).

The lessons are started all at once, two at a time (``MINIDP_LESSON_FAST=1``), in one of two
forms: as a subprocess exactly as a learner runs it (``python lessons/NN_name.py``), or as a
notebook (jupytext converts the ``# %%`` cells, nbclient executes them in a Jupyter kernel:
``tests/scripts/run_notebook.py``); each test then waits for its own run. A lesson passes
when it exits 0 and prints "All N checks passed." — its checks assert, so a failing
comparison with torch fails the lesson.

The README's test command runs the script form: the same cells and checks as the notebook,
once. The notebook form (marked ``notebook``) adds only the Jupyter kernel around them (no
``__file__``, ranks that find their function through ``kit``), so ``.ci/run`` runs it as a
second command rather than every test run paying for each lesson twice.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

LESSONS_DIR = Path(__file__).resolve().parents[1] / "lessons"
LESSONS = sorted(p.name for p in LESSONS_DIR.glob("[0-9][0-9]_*.py"))
NOTEBOOK_RUNNER = Path(__file__).resolve().parent / "scripts" / "run_notebook.py"
PARALLEL = 2  # the machine has 2 cores; multi-rank lessons start their own processes
TIMEOUT_S = 240


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(MINIDP_LESSON_FAST="1", NO_COLOR="1", PYTHONUNBUFFERED="1")
    # The lessons teach on CPU: 03, 04 and 16 check torch.nn.DataParallel's no-GPU
    # behaviour (the plain module), which a GPU host would replace with cuda:0.
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _run(argv: list[str], stdin: str | None = None) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv,
        cwd=LESSONS_DIR,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=_env(),
    )
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0


@pytest.fixture(scope="module")
def lesson_runs(request):
    """Start the selected lessons now (scripts, then notebooks); tests collect the results."""
    wanted = {  # only what this session will check: "-k 08_" runs one lesson, not all
        (item.callspec.params["how"], item.callspec.params["name"])
        for item in request.session.items
        if item.originalname == "test_lesson_runs_and_checks_pass"
    }
    pool = ThreadPoolExecutor(max_workers=PARALLEL)
    # the longest lessons first, so the pool is not left waiting on one at the end
    order = sorted(LESSONS, key=lambda name: not name.startswith(("17", "05", "10", "06")))
    argv = {
        "script": lambda name: [sys.executable, name],
        # jupytext converts the # %% cells, nbclient runs them in a Jupyter kernel
        "notebook": lambda name: [sys.executable, str(NOTEBOOK_RUNNER), name],
    }
    runs: dict[tuple[str, str], Future] = {
        (how, name): pool.submit(_run, argv[how](name))
        for how in argv
        for name in order
        if (how, name) in wanted
    }
    yield runs
    pool.shutdown(wait=True)


def test_every_lesson_is_here():
    numbers = [int(name[:2]) for name in LESSONS]
    assert numbers == list(range(1, len(LESSONS) + 1)), f"lessons are not numbered 1..N: {LESSONS}"
    readme = (LESSONS_DIR / "README.md").read_text()
    for name in LESSONS:
        assert name in readme, f"{name} is missing from lessons/README.md"


@pytest.mark.parametrize("how", ["script", pytest.param("notebook", marks=pytest.mark.notebook)])
@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_and_checks_pass(lesson_runs, name, how):
    rc, out, seconds = lesson_runs[how, name].result()
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
