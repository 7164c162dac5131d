"""Rank processes behind the same ``run`` as the thread world, for exercises whose torch
component needs a full ProcessGroup (torch DDP): ``Exercise(..., processes=True)``.

The learner's function cannot be pickled (its module is loaded from a path), so each rank
process loads the file itself and finds the exercise in the catalogue by name. A rank's
line is not known for a stuck process; the report names the ranks still running.

Starting rank processes is what a check spends its time on (every rank imports torch), so
one world of at least ``SHARED_SIZE`` ranks serves every case: a case of ``w`` ranks runs
on the group of ranks ``0..w-1`` (``dist.new_group``, made once per size, by every rank as
torch requires) and the others wait. The learner's function gets that group, so code that
uses the group it is given works at every size; code that reaches for the default group
(``dist.all_reduce(t)`` without ``group=``) talks to the wrong ranks and fails.

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
SHARED_SIZE = 4  # the smallest shared world: the usual cases run 1 to 4 ranks
_loaded: dict[tuple[str, str], object] = {}  # per rank process: (name, path) -> learner fn
_groups: dict[int, object] = {}  # per rank process: size -> the group of ranks 0..size-1


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


def _group_of(size: int, world_size: int):
    if size == world_size:
        return dist.group.WORLD
    if size not in _groups:  # every rank calls new_group, members or not (torch's rule)
        _groups[size] = dist.new_group(list(range(size)))
    return _groups[size]


def _rank_job(rank: int, world_size: int, size: int, name: str, path: str, case: dict):
    from minidp.exercise.catalogue import find  # here: the catalogue imports this package

    group = _group_of(size, world_size)
    if rank >= size:
        return None  # not in this case's group: wait for the next case
    if (name, path) not in _loaded:
        _loaded[name, path] = load(Path(path), name)
    try:
        return find(name).run_rank(_loaded[name, path], case, rank, size, group)
    except NotImplementedError as exc:
        # An untouched stub raises this on every rank before any message: handing it back
        # as a value keeps the processes (a raising rank exits, and restarting costs seconds).
        return _Todo(str(exc))


class ProcessRanks:
    """The first ``size`` ranks of a shared world of rank processes, reused across cases."""

    def __init__(self, size: int, world: ProcessWorld) -> None:
        self.size = size
        self._world = world

    @property
    def broken(self) -> bool:
        return self._world.broken

    def prepare(self, fn) -> None:
        """``fn(rank, world_size)`` on every rank once, with the start-up deadline."""
        self._world.run(fn, timeout=PREPARE_S)

    def run(self, name: str, path: str, case: dict, deadline: float) -> Run:
        try:
            every = self._world.run(_rank_job, self.size, name, path, case, timeout=deadline)
            values = every[: self.size]
            todo = {
                r: RemoteError("NotImplementedError", v.message, "")
                for r, v in enumerate(values)
                if isinstance(v, _Todo)
            }
            return Run([None if r in todo else v for r, v in enumerate(values)], errors=todo)
        except WorkerError as err:
            run = Run(values=[None] * self.size)
            for f in err.failures:  # root cause first
                if f.stuck and f.rank < self.size:
                    run.stuck[f.rank] = "a line inside the rank process (not shown for processes)"
            root = err.failures[0]
            if not root.stuck:
                what = root.exc_type or "exit"
                run.errors[root.rank] = RemoteError(what, root.headline(), root.traceback)
            return run

    def close(self) -> None:
        """The shared world stays up for the next check (closed at exit)."""


_shared: list[ProcessWorld] = []  # the one shared world (replaced when broken or too small)


def shared_ranks(size: int, timeout: float) -> ProcessRanks:
    """The first ``size`` ranks of the world shared by every check in this process (a
    ``check --all`` or a test session): starting one costs seconds — every rank imports
    torch. A world broken by a failing case, or smaller than ``size``, is replaced."""
    if not _shared or _shared[0].broken or _shared[0].world_size < size:
        if _shared and not _shared[0].broken:
            _shared[0].close()
        if not _shared:
            atexit.register(lambda: [w.close() for w in _shared if not w.broken])
        _groups.clear()
        _shared[:] = [ProcessWorld(max(size, SHARED_SIZE), timeout=timeout)]
    return ProcessRanks(size, _shared[0])
