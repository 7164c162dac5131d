"""What a check found: one case's :class:`Outcome`, and the :class:`Report` of a whole check.

``runner.py`` fills them in; ``report.py`` prints them; ``python -m minidp exercise check
NAME --json`` writes them out.

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from minidp.exercise.spec import Case, Exercise, Mistake, Result


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


CHANGED_CHECKER = Mistake(
    "changed the checker",
    "your file re-pointed names in minidp's or torch's code, which computes the answer "
    "yours is compared with: a file that does that cannot pass. Remove the assignments.",
)
