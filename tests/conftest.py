"""Shared fixtures: long-lived worlds of rank processes, reused across the whole session.

Starting a world costs a rendezvous and a fork per rank (from a server that imported torch
once, ``minidp/launch/forkserver.py``), so tests do not spawn per test:
``process_world(n)`` returns a cached ``ProcessWorld`` of ``n`` ranks, started on
first use and restarted only if a test broke it (a failing rank marks it broken).
Functions sent to the ranks must be module-level (picklable).

The exercises' checks, the real scripts' torchrun launches and the lessons' runs start
when collection ends and run beside the other tests; the tests that collect them run last
(``lesson_runs.py`` says why).
"""

from __future__ import annotations

import os

# One code path for MKL's matmuls in every process of the run (this one, the ranks, the
# lessons, torchrun's workers: they inherit it). A rank once computed lesson 27's loss one
# ulp off the reference, the exact bits of MKL's SSE4.2/AVX kernels, on a machine whose
# other processes took the AVX-512 path: left to MKL, each process picks its own. STRICT:
# the same bits whatever the buffers' alignment (plain "AVX2", which does not promise that,
# made lesson 27's pipeline gradients differ from one process's, every run). Both sides of
# every comparison still run torch's and minidp's code on that one path.
os.environ.setdefault("MKL_CBWR", "AVX2,STRICT")

import pytest
import test_exercises
import test_lessons
import test_real_scripts
import torch
from torch_versions import verified_line

from minidp.launch import ProcessWorld


def pytest_terminal_summary(terminalreporter):
    """One line before pytest's own summary: which torch ran, and the newest verified one."""
    terminalreporter.write_line(verified_line(torch.__version__))


# they read background runs, in the runs' order
LAST = ("test_exercises", "test_real_scripts", "test_lessons")


def pytest_collection_modifyitems(items):
    """The tests that read background runs last (a stable sort: every other test keeps its
    order)."""
    place = lambda item: getattr(item.module, "__name__", "")
    items.sort(key=lambda item: LAST.index(place(item)) + 1 if place(item) in LAST else 0)


def pytest_collection_finish(session):
    # the runs in the order their tests come up: the exercises', the scripts', the lessons'
    jobs = test_exercises.background_jobs(session.items)
    test_lessons.start_runs(session, jobs | test_real_scripts.background_jobs(session.items))


def pytest_sessionfinish(session):
    runs = session.config.stash.get(test_lessons.RUNS, None)
    if runs is not None:
        runs.stop()  # after an interrupted or -x run: no lesson left running
    test_real_scripts.remove_folders()  # (a test that ran removed its own already)


@pytest.fixture(scope="session")
def process_world():
    worlds: dict[int, ProcessWorld] = {}

    def get(world_size: int) -> ProcessWorld:
        world = worlds.get(world_size)
        if world is None or world.broken:
            world = worlds[world_size] = ProcessWorld(world_size, timeout=60.0)
        return world

    yield get
    # The suite's last seconds: a polite close waits for each rank's own exit (gc, group
    # teardown, interpreter shutdown: 1-2 s per world, one world after another, 4-7 s in
    # all). Nothing is left to check here (every ``spawn`` in the suite closes its world
    # politely and checks that no process is left), so these ranks are killed.
    for world in worlds.values():
        if not world.broken:
            world.close(kill=True)
