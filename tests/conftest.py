"""Shared fixtures: long-lived worlds of rank processes, reused across the whole session.

Starting a rank process costs about a second (it imports torch), so tests do not spawn
per test: ``process_world(n)`` returns a cached ``ProcessWorld`` of ``n`` ranks, started on
first use and restarted only if a test broke it (a failing rank marks it broken).
Functions sent to the ranks must be module-level (picklable).

The lessons' runs and the real scripts' torchrun launches start when collection ends and
run beside the other tests; the tests that collect them run last (``lesson_runs.py`` says
why).
"""

from __future__ import annotations

import pytest
import test_lessons
import test_real_scripts
import torch
from torch_versions import verified_line

from minidp.launch import ProcessWorld


def pytest_terminal_summary(terminalreporter):
    """One line before pytest's own summary: which torch ran, and the newest verified one."""
    terminalreporter.write_line(verified_line(torch.__version__))


LAST = ("test_real_scripts", "test_lessons")  # they read background runs, in the runs' order


def pytest_collection_modifyitems(items):
    """The tests that read background runs last (a stable sort: every other test keeps its
    order)."""
    place = lambda item: getattr(item.module, "__name__", "")
    items.sort(key=lambda item: LAST.index(place(item)) + 1 if place(item) in LAST else 0)


def pytest_collection_finish(session):
    # the runs in the order their tests come up: the scripts', then the lessons'
    test_lessons.start_runs(session, test_real_scripts.background_jobs(session.items))


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
