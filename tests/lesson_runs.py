"""The lessons' runs, started when collection ends and run beside the rest of the suite.

Why: each lesson is a subprocess that imports torch and starts its own rank processes —
about four minutes of work on 2 cores. Most other tests wait on messages between ranks
and leave a core idle, so one lesson at a time runs beside them from the start, and a
second joins when the lesson tests come up (``conftest.py`` puts them last) and nothing
else is left to run. Each lesson test then only collects its own run.

The lessons run under one runner process (this file as a script), not as the test
process's own children: the launcher tests check that no child of theirs outlives a
world (``child_processes() <= before``), and a lesson starting beside them would read as
a leftover. The runner starts before any test, so it is in every snapshot. It reads
``widen N`` lines on stdin, writes one JSON line per finished run, and kills its lessons
when stdin closes (the test process ended, however it ended).

The exercises' checks (``test_exercises.py``: sandboxes, mostly waiting) and the real
scripts' torchrun launches (``test_real_scripts.py``: processes that mostly wait on each
other) are jobs here too, queued before the lessons, their tests placed just before the
lessons' (``conftest.py``). Since rank processes fork from a server that imported torch
(``minidp/launch/forkserver.py``) the suite leaves the CPU half idle, and this background
work fills it; two lessons at a time from the start did not pay (measured slower).

Used by ``conftest.py`` (start, widen, stop), ``test_lessons.py``, ``test_exercises.py``
and ``test_real_scripts.py`` (results).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from minidp.launch.leftovers import kill_descendants

LESSONS_DIR = Path(__file__).resolve().parents[1] / "lessons"
TIMEOUT_S = 240  # one lesson, even on a loaded machine


def lesson_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(MINIDP_LESSON_FAST="1", NO_COLOR="1", PYTHONUNBUFFERED="1")
    # a process that crashes (a rank's SIGSEGV inside torch, seen now and then in lesson 36)
    # prints its Python stack into the run's output, which a failing test shows
    env["PYTHONFAULTHANDLER"] = "1"
    # The lessons teach on CPU: 03, 04 and 16 check torch.nn.DataParallel's no-GPU
    # behaviour (the plain module), which a GPU host would replace with cuda:0.
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


class LessonRuns:
    """The test process's side: ``key -> argv`` runs handed to the runner; ``result`` waits."""

    def __init__(
        self, jobs: dict[tuple[str, str], list[str]], timeout_s: float = TIMEOUT_S
    ) -> None:
        self._futures: dict[tuple[str, str], Future] = {key: Future() for key in jobs}
        self._runner = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=lesson_env(),
        )
        self._send(
            {"jobs": [[list(key), argv] for key, argv in jobs.items()], "timeout_s": timeout_s}
        )
        threading.Thread(target=self._collect, name="lesson-results", daemon=True).start()

    def widen(self, workers: int) -> None:
        """Run up to ``workers`` lessons at once from now on."""
        self._send({"widen": workers})

    def keys(self) -> list[tuple[str, str]]:
        """The runs asked for, ``(kind, name)``."""
        return list(self._futures)

    def result(self, key: tuple[str, str], timeout: float | None = None) -> tuple[int, str, float]:
        """``(exit code, output, seconds)`` of that run, once it has finished (the runner
        kills a run, and all it started, at ``timeout_s``: every wait ends)."""
        return self._futures[key].result(timeout)

    def stop(self) -> None:
        """End the runner, which kills what still runs (their ranks follow their parent)."""
        try:
            self._runner.stdin.close()
        except OSError:
            pass
        try:
            self._runner.wait(30)
        except subprocess.TimeoutExpired:
            self._runner.kill()

    def _send(self, message: dict) -> None:
        self._runner.stdin.write(json.dumps(message) + "\n")
        self._runner.stdin.flush()

    def _collect(self) -> None:
        for line in self._runner.stdout:
            key, rc, out, seconds = json.loads(line)
            self._futures[tuple(key)].set_result((rc, out, seconds))
        for future in self._futures.values():  # the runner ended before this run did
            if not future.done():
                future.set_result((-1, "the lesson runner ended before this lesson ran", 0.0))


def _stop(proc: subprocess.Popen) -> None:
    """SIGKILL a lesson and everything below it: its ranks, or a notebook's Jupyter kernel,
    which runs in a session of its own (so a process-group kill would miss it)."""
    kill_descendants(proc.pid)
    proc.kill()


def _run_one(argv: list[str], timeout_s: float, procs: set, lock) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    # The output goes to a file, not a pipe: a pipe stays open while any process that
    # inherited it lives, so reading it to the end could outwait a killed lesson.
    with tempfile.TemporaryFile("w+") as out:
        with lock:
            proc = subprocess.Popen(
                argv,
                cwd=LESSONS_DIR,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            procs.add(proc)
        try:
            rc, note = proc.wait(timeout=timeout_s), ""
        except subprocess.TimeoutExpired:
            _stop(proc)
            rc, note = -9, f"\n[killed after the {timeout_s}s timeout, with all it started]"
            proc.wait()
        with lock:
            procs.discard(proc)
        out.seek(0)
        return rc, out.read() + note, time.perf_counter() - t0


def serve() -> None:
    """The runner: run the jobs from stdin, ``widen`` workers at a time; report on stdout."""
    first = json.loads(sys.stdin.readline())
    queue = [(tuple(key), argv) for key, argv in first["jobs"]]
    procs: set[subprocess.Popen] = set()
    lock = threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                if not queue:
                    return
                key, argv = queue.pop(0)
            rc, out, seconds = _run_one(argv, first["timeout_s"], procs, lock)
            with lock:
                print(json.dumps([key, rc, out, seconds]), flush=True)

    workers = 0
    for line in sys.stdin:  # until the test process closes stdin (or dies)
        while workers < json.loads(line)["widen"]:
            threading.Thread(target=drain, daemon=True).start()
            workers += 1
    with lock:
        queue.clear()
        for proc in procs:
            _stop(proc)


if __name__ == "__main__":
    serve()
