"""Exercises checked against PyTorch: ``python -m minidp exercise ...``.

    python -m minidp exercise list [--names]                     # what there is to write
    python -m minidp exercise check ring_all_reduce [--path my.py]  # lessons/exercises/NAME.py
    python -m minidp exercise check --all [--dir DIR] [--json]   # a score table (a class)

``check`` prints each case, the smallest failing one (expected vs got per rank) and the
classic mistake (a *slip*, ``lessons/exercises/slips/NAME/``) that answers alike (exit codes:
``--help``). The *zygote* (``zygote.py``) forks every process and kills all they leave; the
*sandbox* (``sandbox.py``) alone runs the learner's code, sending answers as bytes
(``wire.py``); the *judge* (``runner.py``) compares them.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from minidp.tools.exercise import report as printer
from minidp.tools.exercise.catalogue import EXERCISES, NAMES, find
from minidp.tools.exercise.inputs import describe
from minidp.tools.exercise.report import ERROR, FAIL, PASS, exit_code
from minidp.tools.exercise.runner import DEADLINE_S, check, check_deadline
from minidp.tools.exercise.spec import STUBS

__all__ = ["EXERCISES", "NAMES", "check", "find", "main"]


def _entry(rep) -> dict:  # one exercise in the ``--all --json`` report
    f, hint = rep.failure, rep.hint
    cases = [{"i": i, "case": describe(o.case), "status": o.status, "detail": o.detail[:300]}
             for i, o in enumerate(rep.outcomes, 1)]  # fmt: skip
    return {"exercise": rep.exercise.name, "path": str(rep.path), "exit": exit_code(rep),
            "status": printer.status_word(rep), "passed": sum(o.passed for o in rep.outcomes),
            "cases": len(rep.outcomes), "failing case": describe(f.case) if f else None,
            "mistake": hint and hint.name, "hint": hint and hint.text,
            "slip": hint and hint.source, "tamper": rep.tamper, "report": printer.summary(rep),
            "case results": cases}  # fmt: skip


def _check_all(folder: str | None, deadline: float, generated: int | None, as_json: bool) -> int:
    base, entries = Path(folder) if folder else STUBS, []
    out = sys.stderr if as_json else sys.stdout  # --json: stdout is the report's alone, and
    stdout = os.dup(1)  # fd 1 too, meanwhile (any process's log: torch 2.8's gloo writes there)
    os.dup2(2 if as_json else stdout, 1)
    print(f"checking every exercise in {base}", file=out, flush=True)
    row = "  {exercise:<28} {status:<36} cases {passed}/{cases}"
    for name in NAMES:
        p = base / f"{name}.py"
        entries.append(_entry(check(find(name), p, deadline, generated)) if p.is_file() else {
            "exercise": name, "path": str(p), "exit": FAIL, "status": "missing",
            "passed": 0, "cases": 0, "case results": []})  # fmt: skip
        print(row.format(**entries[-1]), file=out, flush=True)
    os.dup2(stdout, 1)
    os.close(stdout)
    score = sum(e["status"] == "pass" for e in entries)
    report = {"folder": str(base), "score": score, "of": len(entries), "exercises": entries}
    text = f"\nscore: {score}/{len(entries)} exercises pass"
    print(json.dumps(report, indent=1, default=str) if as_json else text)
    failed = ERROR if any(e["exit"] == ERROR for e in entries) else FAIL
    return PASS if score == len(entries) else failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="minidp exercise", description="Exercises checked against PyTorch.",
        epilog="check exits 0 if every case passed, 1 if a case failed, 2 on tampering or no "
        "verdict (usage error, cannot import, the sandbox ended early)")  # fmt: skip
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="list the exercises").add_argument(
        "--names", action="store_true", help="names only, one per line")  # fmt: skip
    ck = sub.add_parser("check", help="check an exercise (exit 0 iff every case passes)")
    ck.add_argument("name", nargs="?", help="exercise name (see 'list')")
    ck.add_argument("--path", help="the file to check (default: lessons/exercises/NAME.py)")
    ck.add_argument("--all", action="store_true", help="check every exercise: a score table")
    ck.add_argument("--dir", help="with --all: folder holding NAME.py files (a student's)")
    ck.add_argument("--json", action="store_true", help="with --all: the report as JSON")
    ck.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds per case")
    ck.add_argument("--generated", type=int, help="drawn cases (default: the exercise's)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.action == "list":
        width, lessons = max(map(len, NAMES)), max(len(e[1]) for e in EXERCISES)
        rows = [f"{n:<{width}}  {le:<{lessons}}  {s}" for n, le, s in (
            ("name", "lesson", "what you write"), *EXERCISES)]  # fmt: skip
        rows.append("\nstubs: lessons/exercises/NAME.py — check: minidp exercise check NAME")
        print("\n".join(NAMES if args.names else rows))
        return PASS
    if args.all == bool(args.name):
        parser.error("check: give an exercise NAME or --all (see 'minidp exercise list')")
    try:
        check_deadline(args.deadline)
    except ValueError as exc:
        parser.error(f"check: {exc}")
    if args.all:
        return _check_all(args.dir, args.deadline, args.generated, args.json)
    if args.json:
        parser.error("check: --json goes with --all (a grading script reads every exercise)")
    try:
        exercise = find(args.name)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ERROR
    target = Path(args.path) if args.path else exercise.stub
    print(f"{args.name}: checking {target} against {exercise.reference}\n  running every case "
          "in a sandbox process, then torch's side ...", flush=True)  # fmt: skip
    rep = check(exercise, target, args.deadline, args.generated)
    for i, o in enumerate(rep.outcomes, 1):
        print(printer.case_line(i, o))
    print(printer.summary(rep), flush=True)
    return exit_code(rep)
