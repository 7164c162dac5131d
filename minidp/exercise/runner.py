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

import math
import re
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from minidp.comm.errors import PeerError
from minidp.exercise import seal as seals
from minidp.exercise.learner import LoadError, learner_line, load
from minidp.exercise.learner_group import GROUP_MISTAKES, LearnerGroup, PostOffice, guarded
from minidp.exercise.outcome import CHANGED_CHECKER, Outcome, Report
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


def check_settings(deadline: float, generated: int) -> None:
    """ValueError unless ``deadline`` is a positive finite number of seconds and
    ``generated`` a count >= 0 (0 would end every case at once; nan never)."""
    if not isinstance(deadline, (int, float)) or not math.isfinite(deadline) or deadline <= 0:
        raise ValueError(
            f"deadline: expected a positive number of seconds (default {DEADLINE_S:g}), got "
            f"{deadline!r}. Hint: a deadline of 0 or less ends every case before it starts"
        )
    if not isinstance(generated, int) or generated < 0:
        raise ValueError(
            f"generated: expected a count >= 0 (default {GENERATED}), got {generated!r}"
        )


def _type(exc: BaseException) -> str:
    return getattr(exc, "type_name", type(exc).__name__)  # a rank process's: its own type


def _raised(rank: int, exc: BaseException) -> str:
    """``rank 1 raised ValueError: ...`` — without saying "rank 1" twice when the message
    already starts with it (a rank process's headline)."""
    what, text = _type(exc), str(exc)
    if text.startswith(f"rank {rank} "):
        return text
    return f"rank {rank} raised {what}: {text}"


def _job(run_rank, fn, office, case, rank, world_size, group) -> Result:
    """One thread rank's case: the learner's function gets a :class:`LearnerGroup`."""
    learner = LearnerGroup(group, office)
    result = run_rank(guarded(fn, group, learner), case, rank, world_size, group)
    result.extra["bytes sent"] = learner.sent_bytes
    return result


class Checker:
    """Runs one exercise's cases against one file, reusing worlds between cases."""

    def __init__(self, exercise: Exercise, path: Path, deadline: float = DEADLINE_S) -> None:
        self.exercise = exercise
        self.path = Path(path).resolve()
        self.deadline = deadline
        self.seal = seals.Seal()  # before the learner's code runs: what the checker is
        try:
            self.fn = load(self.path, exercise.name, deadline=deadline)
        finally:
            changed = self.seal.broken()
            self.seal.restore()
        if changed:
            raise LoadError(seals.explain(changed, "while being imported"))
        self._worlds: dict = {}  # world size -> ThreadWorld or ProcessRanks
        self._discarded: list[ThreadWorld] = []  # failed worlds whose threads may still run

    def _world(self, size: int):
        world = self._worlds.get(size)
        if world is not None and world.broken and not self.exercise.processes:
            self._discarded.append(world)  # its rank threads are joined in close()
        if world is None or world.broken:
            kind = shared_ranks if self.exercise.processes else ThreadWorld
            world = self._worlds[size] = kind(size, timeout=self.deadline + 1.0)
            if self.exercise.prepare is not None:  # slow first uses, outside the deadline
                world.prepare(self.exercise.prepare)
        return world

    def run_case(self, case: Case) -> Outcome:
        outcome = self._run_case(case)
        changed = self.seal.broken()
        if changed:  # whatever the answers said: they were judged by patched code
            self.seal.restore()
            text = seals.explain(changed, "while this case ran")
            return Outcome(case, "error", text, mistake=CHANGED_CHECKER, error="changed")
        return outcome

    def _run_case(self, case: Case) -> Outcome:
        world = self._world(case["world"])
        if self.exercise.processes:
            run = world.run(self.exercise.name, str(self.path), case, self.deadline)
        else:
            job = partial(_job, self.exercise.run_rank, self.fn, PostOffice(), case)
            run = world.run(job, self.deadline, focus=str(self.path))
        root = run.root_error() if run.errors else None
        own_error = root is not None and not isinstance(root[1], PeerError)
        if run.stuck and not own_error:  # (a rank's own error is the cause, not the hang)
            lines = [f"rank {r} still running, at {where}" for r, where in run.stuck.items()]
            lines += [_raised(r, e) for r, e in run.errors.items()]
            head = f"ranks {sorted(run.stuck)} did not finish within {self.deadline:g}s"
            hint = " — a deadlock: a send nobody receives, or a recv nobody sends to?"
            if all(".send(" in where for where in run.stuck.values()):
                lines.append(BLOCKING_SENDS)
            return Outcome(case, "stuck", "\n".join([head + hint, *lines]))
        if run.errors:
            rank, exc = root
            what = _type(exc)
            if what == "NotImplementedError":
                return Outcome(case, "todo", "not implemented yet")
            where = learner_line(exc, str(self.path))
            detail = f"{_raised(rank, exc)}{where}"
            return Outcome(case, "error", detail, mistake=self._diagnose_error(exc), error=what)
        results: list[Result] = run.values
        tol = self.exercise.tolerance(case) if self.exercise.tolerance else None
        for rank, res in enumerate(results):
            why = compare(res.got, res.expected, tol, res.extra.get("labels"))
            if why:
                return Outcome(
                    case, "wrong", f"rank {rank}: {why}", results, self._diagnose(case, results)
                )
        budget = self.exercise.budget
        if budget is not None and not self.exercise.processes:
            limit = budget.limit(case, case["world"])
            for rank, res in enumerate(results):
                sent = res.extra.get("bytes sent", 0)
                if sent > limit:
                    detail = (
                        f"rank {rank}: right values, but it sent {sent} bytes; "
                        f"{budget.formula} is {limit} bytes here"
                    )
                    return Outcome(case, "wrong", detail, results, budget.mistake)
        return Outcome(case, "pass", "", results)

    def _diagnose(self, case: Case, results: list[Result]) -> Mistake | None:
        for mistake in self.exercise.mistakes:
            if mistake.matches is None:
                continue
            try:
                if mistake.matches(case, results):
                    return mistake
            except Exception:  # a detector must never hide the real failure
                continue
        return None

    def _diagnose_error(self, exc: BaseException) -> Mistake | None:
        """The classic mistake a rank's error shows, from the exercise's ``raised``
        patterns, then the learner group's own (dtype, sizes, unwaited, collectives)."""
        text = f"{_type(exc)}: {exc}"
        for mistake in (*self.exercise.mistakes, *GROUP_MISTAKES):
            if mistake.raised and re.search(mistake.raised, text):
                return mistake
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
            if self.exercise.processes:  # rank processes are shared between checks
                continue
            if world.broken:
                world.join()
            else:
                world.close()
        for world in self._discarded:
            world.join()


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
    check_settings(deadline, generated)
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
