"""Exercises checked against PyTorch: ``python -m minidp exercise ...``.

    python -m minidp exercise list                 # table: name, lesson, what you write
    python -m minidp exercise list --names         # names only, one per line
    python -m minidp exercise check ring_all_reduce              # checks lessons/exercises/
    python -m minidp exercise check ring_all_reduce --path my.py # any file
    python -m minidp exercise check --all [--dir DIR]            # score table (a class)

``check`` prints each case it compared and on failure the smallest failing case (shrunk),
expected vs got per rank, and a hint for the classic mistake it recognised. Exit codes:
0 every case passed; 1 a case failed (wrong, raised, deadlock, not implemented yet); 2 no
verdict (usage error, unknown name, a file that cannot be imported, a check process that
crashed, aborted or exited early — ``isolate.py``). ``--json`` prints the report as JSON
(with ``--all``: one entry per exercise, with its cases), for grading scripts. A
learner's deadlock is reported at the per-case deadline (``--deadline``, default 6 s;
it covers the import too; the check ends a second later), naming the ranks still
running and the line of the learner's file each one is waiting at. The checker itself
runs in a child process (``isolate.py``): gloo aborts a process whose rank receives a
longer message than its buffer, and the command then explains that instead of dying.

Where things are: ``spec.py`` (the Exercise record, case helpers, comparison),
``runner.py`` (load the file, run cases, shrink), ``world.py`` / ``process_world.py``
(reusable thread / process worlds with a deadline), ``outcome.py`` (what a check found),
``report.py`` (what is printed), ``reference.py`` (the official torch collectives on a
given group), ``catalogue.py`` (the list), and one module per topic holding the
exercises (``comm_*.py``, ...).

How to add an exercise (one file each, plus one line in the catalogue):

1. Stub ``lessons/exercises/NAME.py``: a module docstring with the task, the tools allowed
   and 2-4 hints; the function ``NAME(...)`` with its signature and type hints, whose body
   raises ``NotImplementedError("not implemented yet: ...")``. The checker imports the
   file by path and calls ``NAME`` on every rank.
2. Reference solution ``lessons/solutions/NAME.py``: the same function, solved. Where
   minidp has the answer as a textbook function, the solution may call it.
3. Spec: an ``Exercise(...)`` (``spec.py``) in a module of this package grouped by topic
   (``comm_ring.py`` is the model): ``run_rank(fn, case, rank, world_size, group)`` builds
   this rank's inputs from the case (deterministic: seed it from the case and the rank),
   runs the *official torch component* and the learner's ``fn`` on the same inputs and
   returns ``Result(got, expected, extra)``; ``cases`` (fixed, smallest first: world 1, 2,
   an odd world, numel < world, several dtypes/shapes); ``strategy`` (a hypothesis
   strategy of such dicts); ``tolerance`` only where bits cannot match (say why);
   ``processes=True`` where the torch component needs a full ProcessGroup (torch DDP);
   ``shrink`` where the case's keys are not world/shape/dtype/seed (``spec.simpler``);
   ``prepare`` for slow first uses that must not count against the case deadline.
4. Classic mistakes: ``Mistake(name, hint, matches)``; ``matches(case, results)`` looks
   at every rank's ``got``/``expected``/``extra`` and recognises the wrong answer's
   signature. Tried in order; the first match prints its hint. A mistake that raises on a
   rank: ``Mistake(name, hint, raised=REGEX)``, searched in "TypeName: message".
5. Catalogue: add ``module.NAME_SPEC,`` to ``EXERCISES`` in ``catalogue.py`` (one line).
6. Tests (``tests/test_exercises.py`` runs every catalogue entry's solution and stub):
   put each classic wrong solution in ``tests/exercise_wrong/NAME__what_is_wrong.py`` and
   add ``(NAME, "what_is_wrong", "mistake name")`` to the wrong-solution table there.
7. Name the exercise at the end of its lesson: ``python -m minidp exercise check NAME``.

Classroom tooling: imports the library (``minidp.comm``, ``minidp.launch``), never the
other way round. Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from minidp.exercise import isolate
from minidp.exercise import report as printer
from minidp.exercise.catalogue import EXERCISES, find
from minidp.exercise.runner import DEADLINE_S, GENERATED, check
from minidp.exercise.spec import STUBS, describe

__all__ = ["EXERCISES", "check", "find", "main"]


def _list(names_only: bool) -> int:
    if names_only:
        for e in EXERCISES:
            print(e.name)
        return 0
    width = max(len(e.name) for e in EXERCISES)
    lesson_w = max(len(e.lesson) for e in EXERCISES)
    print(f"{'name':<{width}}  {'lesson':<{lesson_w}}  what you write")
    for e in EXERCISES:
        print(f"{e.name:<{width}}  {e.lesson:<{lesson_w}}  {e.summary}")
    print("\nstubs: lessons/exercises/NAME.py — check one: python -m minidp exercise check NAME")
    return 0


class _Verdicts:
    """The verdict file (``isolate.py``): one JSON line per case, then the end."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def write(self, record: dict) -> None:
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(record, default=str) + "\n")


def _mistake(outcome) -> dict:
    m = outcome.mistake
    return {"mistake": m.name if m else None, "hint": m.hint if m else None}


def _check_one(exercise, path: str | None, deadline: float, generated: int, verdicts) -> int:
    target = Path(path) if path else exercise.stub
    print(f"{exercise.name}: checking {target} against {exercise.reference}", flush=True)

    def on_case(i, o):
        print(printer.case_verdict(o), flush=True)
        first = o.detail.splitlines()[0] if o.detail else ""
        verdicts.write({"event": "case", "i": i, "case": describe(o.case), "status": o.status,
                        "detail": first, **_mistake(o)})  # fmt: skip

    rep = check(
        exercise,
        target,
        deadline=deadline,
        generated=generated,
        # the case line goes out before the case runs: if gloo aborts the process, the
        # parent's explanation follows the case it happened in
        on_start=lambda i, case: print(printer.case_start(i, case), end="", flush=True),
        on_case=on_case,
    )
    text = printer.summary(rep)
    print(text, flush=True)
    code = 0 if rep.passed else (isolate.ERROR if rep.load_error else isolate.FAIL)
    f = rep.failure
    verdicts.write({
        "event": "end", "exit": code, "status": printer.status_word(rep),
        "passed": sum(o.passed for o in rep.outcomes), "cases": len(rep.outcomes),
        "failing case": describe(f.case) if f else None, **(_mistake(f) if f else {}),
        "report": text,
    })  # fmt: skip
    return code


def _entry(name: str, path: Path, records: list[dict], why: str) -> dict:
    """One exercise's entry in the ``--all`` report, from its child's verdict file."""
    end = next((r for r in reversed(records) if r.get("event") == "end"), None)
    cases = [r for r in records if r.get("event") == "case"]
    if end is None:
        status = "fail: message sizes differ" if "sizes differ" in why else "error: no verdict"
        end = {"exit": isolate.ERROR, "status": status, "report": why}
    passed = sum(c["status"] == "pass" for c in cases)
    return {"exercise": name, "path": str(path), **{k: v for k, v in end.items() if k != "event"},
            "passed": passed, "cases": len(cases), "case results": cases}  # fmt: skip


def _check_all(folder: str | None, deadline: float, generated: int, as_json: bool) -> int:
    base = Path(folder) if folder else STUBS
    if not as_json:
        print(f"checking every exercise in {base}", flush=True)
    entries = []
    for exercise in EXERCISES:
        path = base / f"{exercise.name}.py"
        if path.is_file():  # each in its own process: one abort must not end the table
            argv = ["check", exercise.name, "--path", str(path)]
            argv += ["--deadline", str(deadline), "--generated", str(generated)]
            _, _, why, records = isolate.run(argv, capture=True)
            entry = _entry(exercise.name, path, records, why)
        else:
            entry = {"exercise": exercise.name, "path": str(path), "exit": isolate.FAIL,
                     "status": "missing", "passed": 0, "cases": 0, "case results": []}  # fmt: skip
        entries.append(entry)
        if not as_json:
            cases = f"{entry['passed']}/{entry['cases']}"
            print(f"  {exercise.name:<28} {entry['status']:<36} cases {cases}", flush=True)
    score = sum(e["status"] == "pass" for e in entries)
    if as_json:
        print(json.dumps({"folder": str(base), "score": score, "of": len(entries),
                          "exercises": entries}, indent=1, default=str))  # fmt: skip
    else:
        print(f"\nscore: {score}/{len(entries)} exercises pass")
    if score == len(entries):
        return isolate.PASS
    return isolate.ERROR if any(e["exit"] == isolate.ERROR for e in entries) else isolate.FAIL


def _seconds(text: str) -> float:
    """argparse type for --deadline: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds (default {DEADLINE_S:g}), got {text!r}"
        )
    return value


def _count(text: str) -> int:
    """argparse type for --generated: a whole number >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="minidp exercise",
        description="Exercises: write a piece of data parallelism, checked against PyTorch.",
        epilog="check exit codes: 0 every case passed, 1 a case failed, 2 no verdict "
        "(usage error, cannot import, crashed, aborted or exited early)",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list", help="list the exercises")
    ls.add_argument("--names", action="store_true", help="names only, one per line")
    ck = sub.add_parser("check", help="check an exercise (exit 0 iff every case passes)")
    ck.add_argument("name", nargs="?", help="exercise name (see 'list')")
    ck.add_argument("--path", help="the file to check (default: lessons/exercises/NAME.py)")
    ck.add_argument("--all", action="store_true", help="check every exercise: a score table")
    ck.add_argument("--dir", help="with --all: folder holding NAME.py files (a student's)")
    ck.add_argument("--json", action="store_true", help="with --all: the report as JSON")
    ck.add_argument("--deadline", type=_seconds, default=DEADLINE_S, help="seconds per case")
    ck.add_argument("--generated", type=_count, default=GENERATED, help="generated cases")
    # internal: run here, not in a child process (see isolate.py); where to write verdicts
    ck.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    ck.add_argument("--verdict-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.action == "list":
        return _list(args.names)
    if args.all == bool(args.name):
        parser.error("check: give an exercise NAME or --all (see 'minidp exercise list')")
    if args.all:
        return _check_all(args.dir, args.deadline, args.generated, args.json)
    if args.json:
        parser.error("check: --json goes with --all (a grading script reads every exercise)")
    try:
        exercise = find(args.name)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return isolate.ERROR
    if not args.in_process:  # nothing the checked code does may decide the exit code
        rc, _, why, _ = isolate.run(argv)
        if why:
            print(f"\n{why}", flush=True)
        return rc
    verdicts = _Verdicts(args.verdict_file)
    return _check_one(exercise, args.path, args.deadline, args.generated, verdicts)
