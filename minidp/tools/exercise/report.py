"""How a check reads on the terminal: one line per case, then the smallest failing case.

Test: ``pytest tests/test_exercises.py -k cli``
"""

from __future__ import annotations

from typing import Any

import torch

from minidp.tools.exercise.outcome import TAMPERING, Outcome, Report
from minidp.tools.exercise.spec import describe

SHOW = 10  # values shown per tensor


def show(x: Any) -> str:
    """A short, exact picture of a value: shape, dtype and the first values."""
    if isinstance(x, torch.Tensor):
        values = x.detach().reshape(-1)[:SHOW].tolist()
        more = ", ..." if x.numel() > SHOW else ""
        text = ", ".join(repr(v) for v in values)
        return f"{tuple(x.shape)} {str(x.dtype).replace('torch.', '')} [{text}{more}]"
    if isinstance(x, (list, tuple)):
        return "[" + "; ".join(show(v) for v in x) + "]"
    return repr(x)


def case_start(i: int, case) -> str:
    """The start of a case's line, printed before the case runs."""
    return f"  case {i:>2}  {describe(case):<48} "


def case_verdict(outcome: Outcome) -> str:
    """The end of a case's line: pass, or what went wrong in a few words."""
    verdict = {
        "pass": "pass",
        "todo": "not implemented yet",
        "wrong": "WRONG",
        "error": "ERROR",
        "stuck": "STUCK",
        "tamper": "TAMPERING",
    }[outcome.status]
    first = outcome.detail.splitlines()[0] if outcome.detail else ""
    return verdict + (f" — {first}" if first and outcome.status != "todo" else "")


def case_line(i: int, outcome: Outcome) -> str:
    return case_start(i, outcome.case) + case_verdict(outcome)


def failure_text(report: Report) -> str:
    f = report.failure
    ex = report.exercise
    if f is None:
        return f"ERROR: {ex.name}: not every case has an answer — no verdict"
    if f.status == "todo":
        return (
            f"NOT DONE: {ex.name} is not implemented yet — edit {report.path} (keep the "
            f"signature), then run: python -m minidp exercise check {ex.name}"
        )
    head = f"FAIL: smallest failing case: {describe(f.case)}"
    if report.shrunk_from is not None:
        head += (
            f"\n      (shrunk from {describe(report.shrunk_from)} in {report.shrink_tries} tries)"
        )
    lines = [head]
    if f.results:
        for rank, r in enumerate(f.results):
            if "input" in r.extra:
                lines.append(f"  rank {rank} input:    {show(r.extra['input'])}")
            lines.append(f"  rank {rank} expected: {show(r.expected)}")
            lines.append(f"  rank {rank} got:      {show(r.got)}")
        lines.append(f"  first difference: {f.detail}")
    else:
        lines += ["  " + line for line in f.detail.splitlines()]
    if f.mistake is not None and f.status != "tamper":
        lines.append(f"hint ({f.mistake.name}): {f.mistake.hint}")
    elif f.status == "wrong":
        if any("input" in r.extra for r in f.results or []):
            where = "the inputs are above"
        else:  # say where they come from rather than point at nothing
            learn = ex.learn
            where = (
                f"each rank's inputs are built from the case above by {learn.__module__}."
                f"{learn.__name__}(fn, case, rank, world_size, group)"
            )
        lines.append(
            f"hint: no classic mistake recognised; run this case by hand ({where}) and "
            "compare your result with expected step by step."
        )
    return "\n".join(lines)


def _earlier(report: Report) -> str:
    """The failing cases judged before the sandbox ended, with their hints."""
    lines = []
    for i, o in enumerate(report.outcomes, 1):
        if not o.passed:
            first = o.detail.splitlines()[0] if o.detail else ""
            lines.append(f"  case {i:>2}  {describe(o.case)}: {o.status.upper()} — {first}")
            if o.mistake is not None:
                lines.append(f"           hint ({o.mistake.name}): {o.mistake.hint}")
    return "Before that, these cases had failed:\n" + "\n".join(lines) if lines else ""


def _output_tail(report: Report, n: int = 15) -> str:
    lines = [line for line in report.output.splitlines() if line.strip()][-n:]
    return (
        "what the code under check printed (last lines):\n  " + "\n  ".join(lines) if lines else ""
    )


def summary(report: Report) -> str:
    ex = report.exercise
    if report.tamper:
        shown = "\n".join(f"  - {t}" for t in report.tamper)
        return (
            f"TAMPERING: {ex.name} — the check saw the code under check reach for what "
            f"decides the verdict (no grade is given):\n{shown}\n"
            f"hint ({TAMPERING.name}): {TAMPERING.hint}"
        )
    if report.load_error:
        return f"ERROR: {report.load_error}"
    if report.died:
        parts = [report.died, _earlier(report), _output_tail(report)]
        return "\n".join(p for p in parts if p)
    if report.passed:
        n = len(report.outcomes)
        return f"PASS: {ex.name} — all {n} cases equal to {ex.reference}"
    return failure_text(report)


def status_word(report: Report) -> str:
    """One word or phrase for the teacher's score table."""
    if report.tamper:
        return "tampering"
    if report.load_error:
        return "cannot import" if "no file" not in report.load_error else "missing"
    if report.died:
        return (
            "fail: message sizes differ" if "sizes differ" in report.died else "error: no verdict"
        )
    if report.passed:
        return "pass"
    f = report.failure
    if f is None:
        return "error: no verdict"
    if f.status == "todo":
        return "not implemented yet"
    if f.mistake is not None:
        return f"fail: {f.mistake.name}"
    return {"stuck": "fail: deadlock", "error": "fail: raised"}.get(f.status, "fail: wrong")
