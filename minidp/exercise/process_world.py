"""Rank processes behind the same ``run`` as the thread world, for exercises whose torch
component needs a full ProcessGroup (torch DDP): ``Exercise(..., processes=True)``.

The learner's function cannot be pickled (its module is loaded from a path), so each rank
process loads the file itself and finds the exercise in the catalogue by name. A rank's
line is not known for a stuck process; the report names the ranks still running.

Test: ``pytest tests/test_exercises_dp_ddp.py``
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from minidp.exercise.learner import load
from minidp.exercise.world import Run
from minidp.launch import ProcessWorld, WorkerError

PREPARE_S = 120.0  # Exercise.prepare: first imports, on a loaded machine
_loaded: dict[tuple[str, str], object] = {}  # per rank process: (name, path) -> learner fn


class RemoteError(Exception):
    """A rank process's exception, as its launcher reported it."""

    def __init__(self, type_name: str, message: str, traceback_text: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.traceback_text = traceback_text


@dataclass
class _Todo:
    """A rank's NotImplementedError, returned instead of raised (picklable)."""

    message: str


def _rank_job(rank: int, world_size: int, name: str, path: str, case: dict):
    from minidp.exercise.catalogue import find  # here: the catalogue imports this package

    if (name, path) not in _loaded:
        _loaded[name, path] = load(Path(path), name)
    try:
        return find(name).run_rank(_loaded[name, path], case, rank, world_size, dist.group.WORLD)
    except NotImplementedError as exc:
        # An untouched stub raises this on every rank before any message: handing it back
        # as a value keeps the processes (a raising rank exits, and restarting costs seconds).
        return _Todo(str(exc))


class ProcessRanks:
    """``size`` rank processes (a ``ProcessWorld``) reused across cases."""

    def __init__(self, size: int, timeout: float) -> None:
        self.size = size
        self._world = ProcessWorld(size, timeout=timeout)

    @property
    def broken(self) -> bool:
        return self._world.broken

    def prepare(self, fn) -> None:
        """``fn(rank, world_size)`` on every rank once, with the start-up deadline."""
        self._world.run(fn, timeout=PREPARE_S)

    def run(self, name: str, path: str, case: dict, deadline: float) -> Run:
        try:
            values = self._world.run(_rank_job, name, path, case, timeout=deadline)
            todo = {
                r: RemoteError("NotImplementedError", v.message, "")
                for r, v in enumerate(values)
                if isinstance(v, _Todo)
            }
            return Run([None if r in todo else v for r, v in enumerate(values)], errors=todo)
        except WorkerError as err:
            run = Run(values=[None] * self.size)
            for f in err.failures:  # root cause first
                if f.stuck:
                    run.stuck[f.rank] = "a line inside the rank process (not shown for processes)"
            root = err.failures[0]
            if not root.stuck:
                what = root.exc_type or "exit"
                run.errors[root.rank] = RemoteError(what, root.headline(), root.traceback)
            return run

    def close(self) -> None:
        if not self._world.broken:
            self._world.close()


_shared: dict[int, ProcessRanks] = {}  # world size -> ranks, for every check in this process


def shared_ranks(size: int, timeout: float) -> ProcessRanks:
    """Rank processes of ``size``, started once per process and reused by every check
    (a ``check --all`` or a test session): starting one costs seconds — every rank
    imports torch. A world broken by a failing case is replaced."""
    world = _shared.get(size)
    if world is None or world.broken:
        if not _shared:
            atexit.register(lambda: [w.close() for w in _shared.values()])
        world = _shared[size] = ProcessRanks(size, timeout)
    return world
