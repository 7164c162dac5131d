"""The lesson runner ends a hung lesson, and everything it started, at its timeout.

Run: ``pytest tests/test_lesson_runner.py`` (about 5 s).

Why it matters: a lesson that hangs must fail its test, not the whole run. A notebook's
Jupyter kernel runs in a session of its own and inherits the lesson's output; a runner
that killed only the lesson and then read its output to the end waited on the kernel
forever (a torch deadlock in one lesson once held a CI run until its time limit).
"""

from __future__ import annotations

import sys

from fault_cases_launch import is_alive
from lesson_runs import LessonRuns

from minidp.launch.leftovers import children_of

# A lesson that hangs, having started a process in a session of its own that shares its
# output (as jupyter_client starts a kernel).
HANGS = """
import subprocess, sys, time
kernel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                          start_new_session=True)
print("kernel", kernel.pid, flush=True)
time.sleep(600)
"""


def test_a_hung_lesson_is_killed_with_all_it_started():
    runs = LessonRuns({("script", "hangs"): [sys.executable, "-c", HANGS]}, timeout_s=3)
    runs.widen(1)
    try:
        rc, out, seconds = runs.result(("script", "hangs"), timeout=60)
        leftovers = children_of(runs._runner.pid)
    finally:
        runs.stop()
    assert rc == -9, out
    assert "killed after the 3s timeout" in out
    kernel = int(out.split("kernel ", 1)[1].split()[0])
    assert not is_alive(kernel), f"the lesson's kernel {kernel} outlived its timeout"
    assert not leftovers, f"the runner still has children: {leftovers}"
    assert 3 <= seconds < 30


def test_a_finished_lesson_reports_its_exit_code_and_output():
    runs = LessonRuns(
        {("script", "ok"): [sys.executable, "-c", "print('All 3 checks passed.'); exit(2)"]}
    )
    runs.widen(1)
    try:
        rc, out, _ = runs.result(("script", "ok"), timeout=60)
    finally:
        runs.stop()
    assert (rc, out) == (2, "All 3 checks passed.\n")
