"""What a check found (an :class:`Outcome` per case, a :class:`Report` per file), as text."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from minidp.tools.exercise.inputs import describe
from minidp.tools.exercise.slips import TAMPERING, Hint
from minidp.tools.exercise.spec import Exercise

PASS, FAIL, ERROR = 0, 1, 2  # the command's exit codes: pass, a case failed, no verdict
VERDICTS = {"pass": "pass", "todo": "not implemented yet", "wrong": "WRONG", "error": "ERROR",
            "stuck": "STUCK", "tamper": "TAMPERING"}  # fmt: skip


@dataclass
class Outcome:
    """One case's verdict: "pass", "wrong", "error", "stuck", "todo" or "tamper"."""

    case: dict
    status: str
    detail: str = ""  # what happened, a line (error, stuck, tamper: several)
    results: list[tuple[Any, Any]] | None = None  # per rank (got, expected), if all answered
    hint: Hint | None = None  # the mistake the checker's own guard named
    error: str = ""  # "TypeName: message" of the rank that raised

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass
class Report:
    """Everything a check found for one file."""

    exercise: Exercise
    path: Path
    cases: int = 0  # how many cases were asked for
    outcomes: list[Outcome] = field(default_factory=list)  # every case judged, in order
    failure: Outcome | None = None  # the case the report shows
    slips: list[Hint] = field(default_factory=list)  # whose answers equal the learner's
    load_error: str = ""
    tamper: list[str] = field(default_factory=list)  # what the sandbox saw the code try
    died: str = ""  # why the sandbox ended before answering every case
    output: str = ""  # what the code under check printed

    @property
    def passed(self) -> bool:
        failed = self.load_error or self.tamper or self.died or self.failure
        return not failed and len(self.outcomes) == self.cases > 0

    @property
    def hint(self) -> Hint | None:
        """The mistake named: the guard's, else the one slip whose answers matched."""
        guard = self.failure and self.failure.hint
        return guard or (self.slips[0] if len(self.slips) == 1 else None)


def exit_code(report: Report) -> int:
    """0 every case passed; 2 tampering or no verdict; 1 a case failed."""
    no_verdict = report.tamper or report.load_error or report.died
    return PASS if report.passed else ERROR if no_verdict else FAIL


def show(x: Any) -> str:
    """Shape, dtype and the first values, exactly."""
    if isinstance(x, torch.Tensor):
        head = ", ".join(repr(v) for v in x.detach().reshape(-1)[:10].tolist())
        return f"{tuple(x.shape)} {str(x.dtype)[6:]} [{head}{', ...' if x.numel() > 10 else ''}]"
    return "[" + "; ".join(map(show, x)) + "]" if isinstance(x, (list, tuple)) else repr(x)


def case_line(i: int, o: Outcome) -> str:
    first = o.detail.splitlines()[0] if o.detail and o.status != "todo" else ""
    return f"  case {i:>2}  {describe(o.case):<48} {VERDICTS[o.status]}" + (
        first and f" — {first}")  # fmt: skip


def _hints(report: Report) -> list[str]:
    h = report.hint
    if h is not None:
        source = h.source and f"\n      (your answers equal {h.source}'s)"
        return [f"hint ({h.name}): {h.text}{source}"]
    if report.slips:  # (a case that tells them apart is missing: say so)
        return ["your answers equal those of several known slips:",
                *[f"hint ({h.name}): {h.text}" for h in report.slips]]  # fmt: skip
    ex = report.exercise
    return [f"hint: none of the known slips ({len(ex.slips)} in lessons/exercises/slips/"
            f"{ex.name}/) gives these answers. Run this case by hand — each rank's inputs are "
            f"built from it by {ex.learn.__module__}.{ex.learn.__name__}(fn, case, rank, "
            "world_size, group) — and compare your result with expected, step by step."
            ]  # fmt: skip


def summary(report: Report) -> str:
    ex, f = report.exercise, report.failure
    if report.tamper:
        seen = "\n".join(f"  - {t}" for t in report.tamper)
        return (f"TAMPERING: {ex.name} — the check saw the code under check reach for what "
                f"decides the verdict (no grade is given):\n{seen}\n"
                f"hint ({TAMPERING.name}): {TAMPERING.text}")  # fmt: skip
    if report.load_error:
        return f"ERROR: {report.load_error}"
    if report.died:
        failed = [f"  {case_line(i, o).strip()}"
                  for i, o in enumerate(report.outcomes, 1) if not o.passed]  # fmt: skip
        printed = [line for line in report.output.splitlines() if line.strip()][-15:]
        failed = failed and ["Before that, these cases had failed:", *failed]
        printed = printed and ["what the code under check printed (last lines):", *printed]
        return "\n".join([report.died, *failed, *printed])
    if report.passed:
        return f"PASS: {ex.name} — all {len(report.outcomes)} cases equal to {ex.reference}"
    if f is None:
        return f"ERROR: {ex.name}: not every case has an answer — no verdict"
    if f.status == "todo":
        return (f"NOT DONE: {ex.name} is not implemented yet — edit {report.path} (keep the "
                f"signature), then run: python -m minidp exercise check {ex.name}")  # fmt: skip
    lines = [f"FAIL: smallest failing case: {describe(f.case)}"]
    for rank, (got, expected) in enumerate(f.results or []):
        lines += [f"  rank {rank} expected: {show(expected)}",
                  f"  rank {rank} got:      {show(got)}"]  # fmt: skip
    details = [f"first difference: {f.detail}"] if f.results else f.detail.splitlines()
    lines += [f"  {line}" for line in details]
    return "\n".join(lines + (_hints(report) if f.status in ("wrong", "error") else []))


def status_word(report: Report) -> str:
    """A word or phrase for the teacher's score table."""
    f = report.failure
    if report.tamper or report.load_error or report.died or report.passed or f is None:
        return ("tampering" if report.tamper else "missing" if "no file" in report.load_error
                else "cannot import" if report.load_error else "pass" if report.passed
                else "error: no verdict")  # fmt: skip
    if f.status == "todo" or report.hint is not None:
        return "not implemented yet" if f.status == "todo" else f"fail: {report.hint.name}"
    return {"stuck": "fail: deadlock", "error": "fail: raised"}.get(f.status, "fail: wrong")
