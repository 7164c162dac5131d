"""Exercises checked against PyTorch: ``python -m minidp exercise ...``.

    python -m minidp exercise list                 # table: name, lesson, what you write
    python -m minidp exercise list --names         # names only, one per line
    python -m minidp exercise check ring_all_reduce              # checks lessons/exercises/
    python -m minidp exercise check ring_all_reduce --path my.py # any file
    python -m minidp exercise check --all [--dir DIR] [--json]   # score table (a class)

``check`` prints each case it compared and on failure the smallest failing case (shrunk),
expected vs got per rank, and a hint for the classic mistake it recognised. Exit codes:
0 every case passed; 1 a case failed (wrong, raised, deadlock, not implemented yet, called
the exercise's answer); 2 tampering or no verdict (usage error, unknown name, a file that
cannot be imported, a sandbox that ended early). ``--json`` (with ``--all``) prints one
entry per exercise with its cases, for grading scripts. A deadlock is reported at the
per-case deadline (``--deadline``, default 6 s; it covers the import too), naming the
ranks still running and the line of the learner's file each one is waiting at.

**The learner's code is treated as adversarial; the verdict is computed where it cannot
reach.** Three kinds of process (``runner.py`` orchestrates):

* the *zygote* (``zygote.py``): imports torch once and forks the others; a child
  subreaper, so whatever the learner starts and orphans stays below it and is killed;
* the *sandbox* (``sandbox.py``): the only process that runs the learner's code. It gets
  the exercise's name, the file and the cases — no expected value, no verdict file —
  runs every case on real gloo ranks (thread ranks, or rank processes forked from it:
  ``forked.py``) and sends each rank's answer back as data (``wire.py``). The guards
  (``guards.py``, ``seal.py``) make the exercise's answer unavailable and record
  tampering;
* the *judge* (this process): once the sandbox and everything below it are killed, it
  computes torch's answers (``expectations.py``; rank processes forked from the zygote
  where torch wants a full group) and compares them with plain tensors rebuilt from
  bytes, and each rank's traffic with what the algorithm must send.

Where things are: ``spec.py`` (the Exercise record and the comparison), ``inputs.py``
(cases and the inputs they make), ``isolate.py`` (the judge's side of the sandbox),
``outcome.py`` (what a check found, the exit code), ``report.py`` (what is printed),
``reference.py`` (the official torch collectives on a given group), ``world.py`` (thread
worlds with a deadline), ``catalogue.py`` (the list), and one module per topic holding the
exercises (``comm_*.py``, ...).

How to add an exercise (one file each, plus one line in the catalogue):

1. Stub ``lessons/exercises/NAME.py``: a module docstring with the task, the tools allowed
   and 2-4 hints; the function ``NAME(...)`` with its signature and type hints, whose body
   raises ``NotImplementedError("not implemented yet: ...")``. The sandbox imports the
   file by path and calls ``NAME`` on every rank.
2. Reference solution ``lessons/solutions/NAME.py``: the same function, written out in
   full (not delegated to the package: what *is* the answer is unavailable in a check).
3. Spec: an ``Exercise(...)`` (``spec.py``) in a module of this package grouped by topic
   (``comm_ring.py`` is the model): ``learn(fn, case, rank, world, group)`` builds this
   rank's inputs from the case (deterministic: seed it from the case and the rank), calls
   ``fn`` and returns ``Answer(got, seen)``; ``expect(case, rank, world, group)`` builds
   the same inputs, runs the *official torch component* and returns ``Expected(expected,
   extra)``; ``cases`` (fixed, smallest first: world 1, 2, an odd world, numel < world,
   several dtypes/shapes, inputs from ``inputs.values``); ``strategy`` (hypothesis);
   ``tolerance`` only where bits cannot match (say why); ``processes`` /
   ``reference_processes`` where either side needs a full ProcessGroup (torch DDP);
   ``shrink`` where the case's keys are not world/shape/dtype/seed; ``prepare`` for slow
   first imports; ``traffic`` (the bytes each rank must send) wherever it communicates;
   ``answers`` (what the learner may not call).
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
other way round. Test: ``pytest tests/test_exercises.py tests/test_exercise_cheats.py``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from minidp.tools.exercise import report as printer
from minidp.tools.exercise.catalogue import EXERCISES, find
from minidp.tools.exercise.inputs import describe
from minidp.tools.exercise.outcome import ERROR, FAIL, PASS, exit_code
from minidp.tools.exercise.runner import DEADLINE_S, GENERATED, check
from minidp.tools.exercise.spec import STUBS

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


def _case_record(i: int, o) -> dict:
    first = o.detail.splitlines()[0] if o.detail else ""
    m = o.mistake
    return {"i": i, "case": describe(o.case), "status": o.status, "detail": first,
            "mistake": m.name if m else None, "hint": m.hint if m else None}  # fmt: skip


def _entry(exercise, path: Path, rep) -> dict:
    """One exercise's entry in the ``--all`` report."""
    f = rep.failure
    cases = [_case_record(i, o) for i, o in enumerate(rep.outcomes, 1)]
    return {
        "exercise": exercise.name, "path": str(path), "exit": exit_code(rep),
        "status": printer.status_word(rep), "passed": sum(o.passed for o in rep.outcomes),
        "cases": len(rep.outcomes), "failing case": describe(f.case) if f else None,
        "mistake": f.mistake.name if f and f.mistake else None,
        "hint": f.mistake.hint if f and f.mistake else None, "tamper": rep.tamper,
        "report": printer.summary(rep), "case results": cases,
    }  # fmt: skip


def _check_one(exercise, path: str | None, deadline: float, generated: int) -> int:
    target = Path(path) if path else exercise.stub
    print(f"{exercise.name}: checking {target} against {exercise.reference}", flush=True)
    print("  running every case in a sandbox process, then torch's side ...", flush=True)
    rep = check(
        exercise,
        target,
        deadline=deadline,
        generated=generated,
        on_start=lambda i, case: print(printer.case_start(i, case), end=""),
        on_case=lambda i, o: print(printer.case_verdict(o), flush=True),
    )
    print(printer.summary(rep), flush=True)
    return exit_code(rep)


def _check_all(folder: str | None, deadline: float, generated: int, as_json: bool) -> int:
    base = Path(folder) if folder else STUBS
    if not as_json:
        print(f"checking every exercise in {base}", flush=True)
    entries = []
    for exercise in EXERCISES:
        path = base / f"{exercise.name}.py"
        if path.is_file():  # each in its own sandbox: nothing one file does reaches the next
            entry = _entry(exercise, path, check(exercise, path, deadline, generated))
        else:
            entry = {"exercise": exercise.name, "path": str(path), "exit": FAIL,
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
        return PASS
    return ERROR if any(e["exit"] == ERROR for e in entries) else FAIL


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
        epilog="check exit codes: 0 every case passed, 1 a case failed, 2 tampering or no "
        "verdict (usage error, cannot import, the sandbox ended early)",
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
        return ERROR
    return _check_one(exercise, args.path, args.deadline, args.generated)
