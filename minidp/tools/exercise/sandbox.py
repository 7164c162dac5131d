"""The sandbox: the one process where the learner's code runs — holding nothing of the verdict.

The judge (``runner.py``) has the zygote fork it (``zygote.py``) with three things: the
exercise's name, the learner's file, the cases. No reference value, no expected answer,
no path to anything that decides the grade: the sandbox imports the file, runs every case
on real gloo ranks (thread ranks, or rank processes forked from here when the learner's
side needs ``torch.distributed`` itself, ``forked.py``), and writes one frame per case to
fd 3 (``wire.py``): each rank's answer as plain data, or the error it raised, or where
each rank was stuck at the deadline. Then the judge kills it and everything it started.

Before the learner's file is imported, the guards go up (``guards.py``): the exercise's
answers are made unavailable, the audit hook watches for solutions, frames and writes,
and the seal is taken. What they find travels with each frame as ``tamper``.

Frames, in order: ``hello``; per case ``start`` then ``case``; then ``done``. (A
``load_error`` instead of the cases when the file cannot be imported.)

Test: ``pytest tests/test_exercise_guards.py``
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import torch.distributed as dist

from minidp.comm.errors import PeerError
from minidp.tools.exercise import guards, wire
from minidp.tools.exercise.catalogue import find
from minidp.tools.exercise.forked import run_ranks
from minidp.tools.exercise.learner import LoadError, learner_line, load
from minidp.tools.exercise.learner_group import LearnerGroup, PostOffice, guarded
from minidp.tools.exercise.seal import Seal, explain
from minidp.tools.exercise.spec import SOLUTIONS, Answer
from minidp.tools.exercise.world import ThreadWorld

BLOCKING_SENDS = (
    "hint (blocking sends): every stuck rank waits in a blocking send, and a send completes "
    "only once its receiver has posted the receive. Start the send with p2p.isend(...), "
    "then recv, then .wait() the send (or let one side receive first)."
)
_LEARNER: dict = {}  # "fn", "name": what rank processes forked from here inherit


def _type(exc: BaseException) -> str:
    return getattr(exc, "type_name", type(exc).__name__)  # a rank process's: its own type


def raised(rank: int, exc: BaseException) -> str:
    """``rank 1 raised ValueError: ...`` — without saying "rank 1" twice when the message
    already starts with it (a rank process's headline)."""
    what, text = _type(exc), str(exc)
    if text.startswith(f"rank {rank} "):
        return text
    return f"rank {rank} raised {what}: {text}"


def _thread_job(learn, fn, office, case, rank, world, group) -> Answer:
    """One thread rank's case: the learner's function gets a :class:`LearnerGroup`."""
    learner = LearnerGroup(group, office)
    answer = learn(guarded(fn, group, learner), case, rank, world, group)
    answer.seen["traffic"] = learner.traffic()
    return answer


def _process_job(rank: int, world: int, case: dict) -> Answer:
    """One rank process's case: the group it is given is the case's own group."""
    group = dist.new_group(list(range(world)))
    return find(_LEARNER["name"]).learn(_LEARNER["fn"], case, rank, world, group)


def _frame(run, deadline: float, path: str) -> dict:
    """What one case's run (``world.Run``) looked like, as a frame."""
    root = run.root_error() if run.errors else None
    own_error = root is not None and not isinstance(root[1], PeerError)
    if run.stuck and not own_error:  # (a rank's own error is the cause, not the hang)
        lines = [f"rank {r} still running, at {where}" for r, where in run.stuck.items()]
        lines += [raised(r, e) for r, e in run.errors.items()]
        head = f"ranks {sorted(run.stuck)} did not finish within {deadline:g}s"
        hint = " — a deadlock: a send nobody receives, or a recv nobody sends to?"
        if all(".send(" in where for where in run.stuck.values()):
            lines.append(BLOCKING_SENDS)
        return {"status": "stuck", "detail": "\n".join([head + hint, *lines])}
    if run.errors:
        rank, exc = root
        if _type(exc) == "NotImplementedError":
            return {"status": "todo"}
        text = f"{raised(rank, exc)}{learner_line(exc, path)}"
        return {"status": "error", "type": _type(exc), "detail": text,
                "error": f"{_type(exc)}: {exc}"}  # fmt: skip
    notes: list[str] = []
    try:
        ranks = [
            {"got": wire.encode(a.got, notes), "seen": wire.encode(a.seen, notes)}
            for a in run.values
        ]
    except Exception as exc:  # the learner's object would not turn into data
        return {"status": "error", "type": type(exc).__name__, "error": str(exc),
                "detail": f"could not read your answer: {type(exc).__name__}: {exc}"}  # fmt: skip
    for n in notes:
        guards.note(n)
    return {"status": "ok", "ranks": ranks}


class _Cases:
    """Runs cases on thread ranks (reusing a world per size) or on forked rank processes."""

    def __init__(self, exercise, fn, path: str, deadline: float) -> None:
        self.exercise, self.fn, self.path, self.deadline = exercise, fn, path, deadline
        self.worlds: dict[int, ThreadWorld] = {}

    def run(self, case: dict) -> dict:
        if self.exercise.processes:
            run = run_ranks(_process_job, case["world"], (case,), self.deadline, self.path)
            return _frame(run, self.deadline, self.path)
        world = self.worlds.get(case["world"])
        if world is None or world.broken:
            world = self.worlds[case["world"]] = ThreadWorld(case["world"], self.deadline + 1.0)
        job = partial(_thread_job, self.exercise.learn, self.fn, PostOffice(), case)
        return _frame(world.run(job, self.deadline, focus=self.path), self.deadline, self.path)


def _findings(seal: Seal, when: str) -> list[str]:
    changed = seal.broken()
    if changed:
        guards.note(explain(changed, when))
    return list(guards.FINDINGS)


def main(payload: dict, fd: int) -> None:
    exercise = find(payload["name"])
    path, deadline = str(Path(payload["path"]).resolve()), payload["deadline"]
    send = partial(wire.write_frame, fd)
    guards.refuse_answers(exercise.answers, tools="the stub's docstring lists the tools")
    guards.install(path, str(SOLUTIONS), guards.protected_dirs())
    seal = Seal()  # after the refusals (they re-point names on purpose), before the file
    send({"kind": "hello"})
    try:
        fn = load(Path(path), exercise.name, deadline=deadline)
    except (LoadError, guards.Tampering) as exc:
        text = str(exc) if isinstance(exc, LoadError) else f"could not import {path}: {exc}"
        send({"kind": "load_error", "text": text,
              "tamper": _findings(seal, "while being imported")})  # fmt: skip
        return
    _findings(seal, "while being imported")  # sent with the first case
    _LEARNER.update(fn=fn, name=exercise.name)
    cases = _Cases(exercise, fn, path, deadline)
    for i, case in enumerate(payload["cases"]):
        send({"kind": "start", "i": i})
        try:
            frame = cases.run(case)
        except guards.Tampering as exc:  # raised into the checker's own code on a rank
            frame = {"status": "error", "type": "Tampering", "error": str(exc), "detail": str(exc)}
        send({"kind": "case", "i": i, **frame, "tamper": _findings(seal, "while a case ran")})
        if frame["status"] in ("todo", "stuck"):
            break  # nothing more to learn from further cases, only time to lose
    send({"kind": "done"})
