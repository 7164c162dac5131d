"""torch's answers, computed once the sandbox is gone: on ``minidp.launch.run_threads``
worlds, or (DDP, ZeRO: a full ``ProcessGroup``) on forked ranks in a reference worker, whose
answers come back pickled (no learner's code ran there)."""

import os

import torch.distributed as dist

from minidp.comm.group import resolve
from minidp.launch import WorkerError, run_threads
from minidp.tools.exercise.catalogue import find
from minidp.tools.exercise.inputs import describe
from minidp.tools.exercise.ranks import receive, run_ranks, send
from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.zygote import Zygote

REFERENCE_S = 300.0  # torch's side of every case: no learner's code, only a loaded machine


class ReferenceFailed(RuntimeError):
    """torch's side of a case raised: no verdict can be given."""


_expected = lambda value: value if isinstance(value, Expected) else Expected(value)


def _on_threads(rank: int, world: int, expect, cases: list[dict]) -> list[Expected]:
    return [_expected(expect(case, rank, world, resolve())) for case in cases]


def _rank_job(rank: int, world: int, task: tuple) -> list:
    name, cases = task
    sizes = sorted({c["world"] for c in cases})  # every rank makes every group, in order
    groups = {w: dist.group.WORLD if w == world else dist.new_group(list(range(w))) for w in sizes}
    expect = find(name).expect
    return [_expected(expect(c, rank, c["world"], groups[c["world"]])) if rank < c["world"]
            else None for c in cases]  # fmt: skip


def main(payload: dict, fd: int) -> None:
    """The reference worker (forked from the zygote): every case on one world of ranks."""
    cases = payload["cases"]
    (run,) = run_ranks(_rank_job, max(c["world"] for c in cases), [(payload["name"], cases)],
                       REFERENCE_S)  # fmt: skip
    rank, (kind, text, trace) = min(run.errors.items()) if run.errors else (0, ("", "stuck", ""))
    result, v = ("error", f"rank {rank}: {kind}: {text}\n{trace}"), run.values
    if run.ok:
        result = ("ok", [[v[r][i] for r in range(c["world"])] for i, c in enumerate(cases)])
    send(fd, result)


def _in_worker(exercise: Exercise, cases: list[dict], zyg: Zygote) -> list[list[Expected]]:
    read_fd, write_fd = os.pipe()
    try:
        zyg.fork("expectations", {"name": exercise.name, "cases": cases}, write_fd, 2)
        os.close(write_fd)
        answer = receive(read_fd, REFERENCE_S + 30)
    finally:
        os.close(read_fd)
        zyg.kill()
    if answer is None:
        raise ReferenceFailed("the reference worker ended without an answer")
    kind, value = answer
    if kind != "ok":
        raise ReferenceFailed(value)
    return value


def expect_all(exercise: Exercise, cases: list[dict], zyg: Zygote) -> list[list[Expected]]:
    """Every rank's :class:`Expected` for each case (torch's on the group: no ``spare`` ranks)."""
    cases = [{k: v for k, v in c.items() if k != "spare"} for c in cases]
    if not cases:
        return []
    if exercise.reference_processes:
        return _in_worker(exercise, cases, zyg)
    out: dict[int, list] = {}
    for w in sorted({c["world"] for c in cases}):
        mine = [n for n, c in enumerate(cases) if c["world"] == w]
        try:
            per_rank = run_threads(_on_threads, w, exercise.expect, [cases[n] for n in mine],
                                   timeout=REFERENCE_S)  # fmt: skip
        except WorkerError as exc:
            at = describe(cases[mine[0]])
            raise ReferenceFailed(f"cases of world {w} ({at}...): {exc}") from None
        for k, n in enumerate(mine):
            out[n] = [per_rank[r][k] for r in range(w)]
    return [out[n] for n in range(len(cases))]
