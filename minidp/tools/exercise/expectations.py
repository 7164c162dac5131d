"""The judge's expected answers: torch's component on every case, once the sandbox is gone.

``Exercise.expect(case, rank, world, group)`` builds a rank's inputs from the case (as the
sandbox did) and runs the official torch component on them. Where that component is
happy with a thread rank's gloo group (the collectives), the cases run here, in the
judge's process, on thread worlds (``world.py``). Where it needs a full ``ProcessGroup``
(torch DDP, ZeroRedundancyOptimizer: ``Exercise.reference_processes``) a *reference
worker* is forked from the zygote — only after the sandbox and everything below it were
killed — which forks one world of rank processes (``forked.py``) for every case: a case of
``w`` ranks runs on the group of ranks ``0..w-1``. It sends back its answers pickled: it
is the checker's own process, and no learner's code has run in it.

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

import atexit
import os
import pickle
import struct
import time
from functools import partial

import torch.distributed as dist

from minidp.tools.exercise import wire
from minidp.tools.exercise.catalogue import find
from minidp.tools.exercise.forked import run_ranks
from minidp.tools.exercise.inputs import describe
from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.world import ThreadWorld
from minidp.tools.exercise.zygote import Zygote

REFERENCE_S = 300.0  # torch's side of every case: no learner's code, only a loaded machine


class ReferenceFailed(RuntimeError):
    """torch's side of a case raised: no verdict can be given."""


def _expect_job(expect, case, rank, world, group) -> Expected:
    return expect(case, rank, world, group)


# The judge's own thread worlds, by size, kept for every round and check of this process:
# making and tearing down a gloo world costs tens of milliseconds, and a check makes rounds
# of cases over several sizes. No learner's code ever runs on them (the sandbox has its
# own); a world broken by a failing reference is replaced.
_WORLDS: dict[int, ThreadWorld] = {}


def _world(size: int) -> ThreadWorld:
    world = _WORLDS.get(size)
    if world is None or world.broken:
        world = _WORLDS[size] = ThreadWorld(size, REFERENCE_S)
    return world


@atexit.register
def _close_worlds() -> None:
    for world in _WORLDS.values():
        if not world.broken:
            world.close()
    _WORLDS.clear()


def _on_threads(exercise: Exercise, cases: list[dict]) -> list[list[Expected]]:
    out = []
    for case in cases:
        run = _world(case["world"]).run(partial(_expect_job, exercise.expect, case), REFERENCE_S)
        if not run.ok:
            rank, exc = run.root_error() or (0, "stuck")
            raise ReferenceFailed(f"case {describe(case)}: rank {rank}: {exc}")
        out.append(run.values)
    return out


def _rank_job(rank: int, world: int, name: str, cases: list[dict]) -> list:
    sizes = sorted({c["world"] for c in cases})  # every rank makes every group, in order
    groups = {w: dist.group.WORLD if w == world else dist.new_group(list(range(w))) for w in sizes}
    expect = find(name).expect
    return [expect(c, rank, c["world"], groups[c["world"]]) if rank < c["world"] else None
            for c in cases]  # fmt: skip


def main(payload: dict, fd: int) -> None:
    """The reference worker (forked from the zygote): every case on one world of ranks."""
    cases = payload["cases"]
    world = max(c["world"] for c in cases)
    run = run_ranks(_rank_job, world, (payload["name"], cases), REFERENCE_S)
    if run.ok:
        result = (
            "ok",
            [[run.values[r][i] for r in range(c["world"])] for i, c in enumerate(cases)],
        )
    else:
        rank, exc = run.root_error() if run.errors else (min(run.stuck), "stuck")
        trace = getattr(exc, "traceback_text", "")
        result = ("error", f"rank {rank}: {exc}\n{trace}")
    data = pickle.dumps(result)
    view = memoryview(struct.pack(">Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _in_worker(exercise: Exercise, cases: list[dict], zyg: Zygote) -> list[list[Expected]]:
    read_fd, write_fd = os.pipe()
    try:
        zyg.fork("expectations", {"name": exercise.name, "cases": cases}, write_fd, 2)
        os.close(write_fd)
        write_fd = -1
        head = wire.read_exactly(read_fd, 8, _until(REFERENCE_S + 30))
        body = head and wire.read_exactly(read_fd, struct.unpack(">Q", head)[0], _until(30))
    except TimeoutError:
        body = None
    finally:
        for f in (read_fd, write_fd):
            if f >= 0:
                os.close(f)
        zyg.kill()
    if not body:
        raise ReferenceFailed("the reference worker ended without an answer")
    kind, value = pickle.loads(body)  # the checker's own process: see the docstring
    if kind != "ok":
        raise ReferenceFailed(value)
    return value


def _until(seconds: float) -> float:
    return time.monotonic() + seconds


def expect_all(exercise: Exercise, cases: list[dict], zyg: Zygote) -> list[list[Expected]]:
    """Every rank's :class:`Expected` for each case, in order."""
    if not cases:
        return []
    if exercise.reference_processes:
        return _in_worker(exercise, cases, zyg)
    return _on_threads(exercise, cases)
