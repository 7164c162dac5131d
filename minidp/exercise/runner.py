"""Run a learner's function on real gloo worlds, case by case, and judge every answer.

For each case every rank runs the exercise's ``run_rank``: the official torch component
and the learner's function on the same inputs. A case passes when every rank's answer
equals torch's (``torch.equal``, or the exercise's stated tolerance). The fixed cases run
first, then generated ones (hypothesis, fixed seed: the same cases every run); the
smallest failing case is found by shrinking and reported with the classic mistake it
matches. Worlds are reused across cases and replaced after any failure.

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from minidp.exercise.learner import LoadError, learner_line, load
from minidp.exercise.process_world import shared_ranks
from minidp.exercise.spec import Case, Exercise, Mistake, Result, compare, simpler
from minidp.exercise.world import ThreadWorld

DEADLINE_S = 6.0  # per case: a deadlock is reported after this, naming ranks and lines
GENERATED = 12  # generated cases after the fixed ones
SHRINK_BUDGET_S = 20.0  # shrinking stops after this long or this many tries
SHRINK_TRIES = 60
BLOCKING_SENDS = (
    "hint (blocking sends): every stuck rank waits in a blocking send, and a send completes "
    "only once its receiver has posted the receive. Start the send with p2p.isend(...), "
    "then recv, then .wait() the send (or let one side receive first)."
)


@dataclass
class Outcome:
    """One case's verdict."""

    case: Case
    status: str  # "pass", "wrong", "error", "stuck", "todo" (not implemented yet)
    detail: str = ""  # one line (error/stuck: several) saying what happened
    results: list[Result] | None = None  # per rank, when every rank answered
    mistake: Mistake | None = None  # the classic mistake recognised, if any
    error: str = ""  # "error": the exception's type name

    def same_failure(self, other: Outcome) -> bool:
        """Fails the same way (for shrinking: keep the hint the learner will read)."""
        return (self.status, self.mistake, self.error) == (other.status, other.mistake, other.error)

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass
class Report:
    """Everything ``check`` found, for the printer and the score table."""

    exercise: Exercise
    path: Path
    outcomes: list[Outcome] = field(default_factory=list)  # every case compared, in order
    failure: Outcome | None = None  # the smallest failing case found (after shrinking)
    shrunk_from: Case | None = None
    shrink_tries: int = 0
    load_error: str = ""

    @property
    def passed(self) -> bool:
        return not self.load_error and self.failure is None and bool(self.outcomes)


def _type(exc: BaseException) -> str:
    return getattr(exc, "type_name", type(exc).__name__)  # a rank process's: its own type


def _job(run_rank, fn, case, rank, world_size, group) -> Result:
    return run_rank(fn, case, rank, world_size, group)


class Checker:
    """Runs one exercise's cases against one file, reusing worlds between cases."""

    def __init__(self, exercise: Exercise, path: Path, deadline: float = DEADLINE_S) -> None:
        self.exercise = exercise
        self.path = Path(path).resolve()
        self.deadline = deadline
        self.fn = load(self.path, exercise.name)
        self._worlds: dict = {}  # world size -> ThreadWorld or ProcessRanks

    def _world(self, size: int):
        world = self._worlds.get(size)
        if world is None or world.broken:
            kind = shared_ranks if self.exercise.processes else ThreadWorld
            world = self._worlds[size] = kind(size, timeout=self.deadline + 1.0)
            if self.exercise.prepare is not None:  # slow first uses, outside the deadline
                world.prepare(self.exercise.prepare)
        return world

    def run_case(self, case: Case) -> Outcome:
        world = self._world(case["world"])
        if self.exercise.processes:
            run = world.run(self.exercise.name, str(self.path), case, self.deadline)
        else:
            job = partial(_job, self.exercise.run_rank, self.fn, case)
            run = world.run(job, self.deadline, focus=str(self.path))
        if run.stuck:
            lines = [f"rank {r} still running, at {where}" for r, where in run.stuck.items()]
            lines += [f"rank {r} raised {_type(e)}: {e}" for r, e in run.errors.items()]
            head = f"ranks {sorted(run.stuck)} did not finish within {self.deadline:g}s"
            hint = " — a deadlock: a send nobody receives, or a recv nobody sends to?"
            if all(".send(" in where for where in run.stuck.values()):
                lines.append(BLOCKING_SENDS)
            return Outcome(case, "stuck", "\n".join([head + hint, *lines]))
        if run.errors:
            rank, exc = run.root_error()
            what = _type(exc)
            if what == "NotImplementedError":
                return Outcome(case, "todo", "not implemented yet")
            where = learner_line(exc, str(self.path))
            return Outcome(case, "error", f"rank {rank} raised {what}: {exc}{where}", error=what)
        results: list[Result] = run.values
        tol = self.exercise.tolerance(case) if self.exercise.tolerance else None
        for rank, res in enumerate(results):
            why = compare(res.got, res.expected, tol)
            if why:
                return Outcome(
                    case, "wrong", f"rank {rank}: {why}", results, self._diagnose(case, results)
                )
        return Outcome(case, "pass", "", results)

    def _diagnose(self, case: Case, results: list[Result]) -> Mistake | None:
        for mistake in self.exercise.mistakes:
            try:
                if mistake.matches(case, results):
                    return mistake
            except Exception:  # a detector must never hide the real failure
                continue
        return None

    def shrink(self, outcome: Outcome) -> tuple[Outcome, int]:
        """The smallest case failing the same way (greedy, from ``spec.simpler``)."""
        if outcome.status == "stuck":  # every try would cost a deadline
            return outcome, 0
        best, tries, end = outcome, 0, time.monotonic() + SHRINK_BUDGET_S
        improved = True
        while improved and time.monotonic() < end and tries < SHRINK_TRIES:
            improved = False
            for candidate in (self.exercise.shrink or simpler)(best.case):
                tries += 1
                o = self.run_case(candidate)
                if o.same_failure(best):
                    best, improved = o, True
                    break
        return best, tries

    def close(self) -> None:
        for world in self._worlds.values():
            if not world.broken and not self.exercise.processes:  # processes are shared
                world.close()


def check(
    exercise: Exercise,
    path: Path | None = None,
    deadline: float = DEADLINE_S,
    generated: int = GENERATED,
    on_case: Callable[[int, Outcome], None] | None = None,
    on_start: Callable[[int, Case], None] | None = None,
) -> Report:
    """Check ``path`` (default: the stub) against ``exercise``.

    ``on_start(i, case)`` is called before case i runs, ``on_case(i, outcome)`` after.
    """
    path = Path(path or exercise.stub)
    report = Report(exercise, path)
    try:
        checker = Checker(exercise, path, deadline)
    except LoadError as exc:
        report.load_error = str(exc)
        return report

    def attempt(case: Case) -> Outcome:
        i = len(report.outcomes) + 1
        if on_start:
            on_start(i, case)
        outcome = checker.run_case(case)
        report.outcomes.append(outcome)
        if on_case:
            on_case(i, outcome)
        return outcome

    try:
        failed = None
        for case in exercise.cases:
            o = attempt(case)
            # shrink the first failure, or the first whose classic mistake was recognised
            if not o.passed and (failed is None or (o.mistake and not failed.mistake)):
                failed = o
            if o.status in ("todo", "stuck"):
                break  # nothing more to learn from further cases, only time to lose
        if failed is None and generated and exercise.strategy:
            failed = _generated(exercise, generated, attempt)
        if failed is not None:
            report.failure, report.shrink_tries = checker.shrink(failed)
            if report.failure.case != failed.case:
                report.shrunk_from = failed.case
    finally:
        checker.close()
    return report


def _generated(exercise: Exercise, n: int, attempt) -> Outcome | None:
    """Generated cases (hypothesis, derandomized): the first failure, or None."""
    try:
        from hypothesis import HealthCheck, Phase, find, settings
        from hypothesis.errors import NoSuchExample
    except ImportError:  # hypothesis is a dev extra: the fixed cases still ran
        return None
    first: list[Outcome] = []

    def fails(case: Case) -> bool:
        o = attempt(dict(case))
        if not o.passed:
            first.append(o)
        return not o.passed

    cfg = settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],  # no hypothesis shrinking: Checker.shrink does that
        suppress_health_check=list(HealthCheck),
    )
    try:
        find(exercise.strategy(), fails, settings=cfg)
    except NoSuchExample:
        pass
    return first[0] if first else None
