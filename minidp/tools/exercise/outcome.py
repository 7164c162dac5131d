"""What a check found: one case's :class:`Outcome`, and the :class:`Report` of a whole check.

``runner.py`` fills them in; ``report.py`` prints them; ``python -m minidp exercise check
--all --json`` writes them out. :func:`exit_code` is the command's exit code.

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from minidp.tools.exercise.spec import Case, Exercise, Mistake, Result

PASS, FAIL, ERROR = 0, 1, 2  # the command's exit codes: pass, a case failed, no verdict


@dataclass
class Outcome:
    """One case's verdict."""

    case: Case
    status: str  # "pass", "wrong", "error", "stuck", "todo" (not implemented yet), "tamper"
    detail: str = ""  # one line (error/stuck/tamper: several) saying what happened
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
    outcomes: list[Outcome] = field(default_factory=list)  # every case judged, in order
    cases: int = 0  # how many cases the first round asked for
    failure: Outcome | None = None  # the smallest failing case found (after shrinking)
    shrunk_from: Case | None = None
    shrink_tries: int = 0
    load_error: str = ""
    tamper: list[str] = field(default_factory=list)  # what the sandbox saw the code try
    died: str = ""  # the sandbox ended before answering every case: why
    died_in: int | None = None  # the case (0-based) it was running then
    output: str = ""  # what the code under check printed (the sandbox's stdout and stderr)

    @property
    def passed(self) -> bool:
        return (
            not self.load_error
            and not self.tamper
            and not self.died
            and self.failure is None
            and bool(self.outcomes)
            and len(self.outcomes) == self.cases
        )


def exit_code(report: Report) -> int:
    """0 every case passed; 2 tampering or no verdict (cannot import, the sandbox ended
    early); 1 otherwise (wrong, raised, deadlock, not implemented yet)."""
    if report.passed:
        return PASS
    if report.tamper or report.load_error or report.died:
        return ERROR
    return FAIL


TAMPERING = Mistake(
    "tampering",
    "code under check reached for what decides the verdict (the checker's pipe, frames, "
    "files or code, the reference solutions, processes left running, or a group of its "
    "own). Your function gets its inputs and its group; the answer must come from them.",
)
USED_COLLECTIVE = Mistake(
    "used a collective instead of send/recv",
    "this exercise is the collective itself: build it from p2p.send / p2p.recv / "
    "p2p.isend / p2p.irecv; minidp's own collectives (their header messages were seen) "
    "and torch's are not allowed here.",
)
