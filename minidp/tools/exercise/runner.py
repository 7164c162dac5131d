"""The judge: the learner's answers from a sandbox (``isolate.py``), torch's computed here
once it is gone (``expectations.py``), compared: values and each rank's bytes. On a failure
the slips run on the smallest failing cases, and the one that answers alike is named."""

import math
import random
from pathlib import Path

from minidp.tools.exercise import slips, wire, zygote
from minidp.tools.exercise.expectations import ReferenceFailed, expect_all
from minidp.tools.exercise.inputs import Case, describe
from minidp.tools.exercise.isolate import run_sandbox
from minidp.tools.exercise.report import Outcome, Report
from minidp.tools.exercise.spec import Exercise, compare

DEADLINE_S = 6.0  # per case: a deadlock is reported after this, naming ranks and lines


def cases_of(exercise: Exercise, generated: int | None = None) -> list[Case]:
    """The fixed cases, then ``generated`` drawn ones, with the machine's keys (``plan``)."""
    n = exercise.generated if generated is None else generated
    rng, drawn = random.Random(exercise.name), []
    for _ in range(50 * n if exercise.draw else 0):
        case = exercise.draw(rng)
        if len(drawn) < n and case not in drawn and case not in exercise.cases:
            drawn.append(case)
    machine = exercise.plan() if exercise.plan else {}
    return [{**c, **machine} for c in (*exercise.cases, *drawn)]


def judge(exercise: Exercise, case: Case, frame: dict, expected: list | None) -> Outcome:
    status, detail = frame.get("status"), wire.decode(str(frame.get("detail", "")))
    if status in ("todo", "stuck"):
        return Outcome(case, status, "not implemented yet" if status == "todo" else detail)
    if status == "error":
        error = wire.decode(str(frame.get("error", "")))
        return Outcome(case, "error", detail, error=error, hint=slips.guard(error))
    try:
        gots = [wire.decode(r["got"]) for r in frame["ranks"]]
        counts = [r.get("traffic") for r in frame["ranks"]]
        if len(gots) != case["world"] or expected is None:
            raise wire.Malformed(f"{len(gots)} answers for {case['world']} ranks")
    except (KeyError, TypeError, wire.Malformed) as exc:
        return Outcome(case, "tamper", f"the sandbox sent a malformed answer ({exc})",
                       hint=slips.TAMPERING)  # fmt: skip
    results = [(got, e.value) for got, e in zip(gots, expected)]
    tol, labels = exercise.tolerance(case) if exercise.tolerance else None, expected[0].labels
    for rank, (got, value) in enumerate(results):
        why = compare(got, value, tol, labels)
        if why:
            return Outcome(case, "wrong", f"rank {rank}: {why}", results)
    wrong = _traffic(exercise, case, results, counts, expected)
    return wrong or Outcome(case, "pass", "", results)


def _traffic(exercise: Exercise, case: Case, results, counts, expected) -> Outcome | None:
    """Right values: did each rank send what the algorithm must (least: with headers)?"""
    t, world = exercise.traffic, case["world"]
    if t is None or world < 2 or not all(isinstance(c, dict) for c in counts):
        return None
    bounds = t.bounds(case, world) if t.bounds else [e.traffic for e in expected]
    for rank, ((least, most), c) in enumerate(zip(bounds, counts)):
        sent, total = c["bytes"], c["bytes"] + c["header_bytes"]
        if least and not total:
            text = (f"rank {rank}: right values, but it sent nothing through the group it was "
                    f"given, where {t.formula} is {least} bytes here — the values did not "
                    "travel through it (another rank's memory, a group of its own?)")  # fmt: skip
            return Outcome(case, "tamper", text, results, hint=slips.TAMPERING)
        if total < least or (most is not None and sent > most):
            bound = least if total < least else most
            text = f"rank {rank}: right values, but it sent {sent} bytes; {t.formula} is {bound}"
            return Outcome(case, "wrong", text + " bytes here", results)
    return None


def _diagnose(exercise: Exercise, reports: list[Report], cases, expected, deadline) -> None:
    """Keep the slips that answer as the learner did on each report's smallest failing cases."""
    failing = {}
    for rep in reports:
        if rep.failure and not rep.failure.hint:
            bad = [n for n, o in enumerate(rep.outcomes) if o.status in ("wrong", "error")]
            failing[id(rep)] = bad[: exercise.diagnose]
    wanted = sorted({n for ns in failing.values() for n in ns})
    if not wanted or not exercise.slips:
        return
    run = run_sandbox(zygote.shared(), exercise.name, [str(p) for p in exercise.slips],
                      [cases[n] for n in wanted], deadline)  # fmt: skip
    tol = lambda n: exercise.tolerance(cases[n]) if exercise.tolerance else None
    for j, path in enumerate(exercise.slips):
        frames = run.frames.get(j, {})
        answers = {n: judge(exercise, cases[n], frames[k], expected.get(n))
                   for k, n in enumerate(wanted) if k in frames}  # fmt: skip
        for rep in reports:
            mine = failing.get(id(rep), [])
            same = [n in answers and slips.same(rep.outcomes[n], answers[n], tol(n)) for n in mine]
            if mine and all(same):
                rep.slips.append(slips.read(path))


def check_deadline(deadline) -> float:
    if isinstance(deadline, (int, float)) and math.isfinite(deadline) and deadline > 0:
        return deadline
    raise ValueError(f"deadline: expected a positive number of seconds (default {DEADLINE_S:g}"
                     f"), got {deadline!r}")  # fmt: skip


def check_files(exercise: Exercise, paths: list[Path], deadline: float = DEADLINE_S,
                generated: int | None = None) -> list[Report]:  # fmt: skip
    """Check every file in one sandbox (the tests' batches; a grade: :func:`check`)."""
    check_deadline(deadline)
    zyg = zygote.shared()  # it imports torch while the cases are drawn
    cases = cases_of(exercise, generated)
    reports = [Report(exercise, Path(p).resolve(), cases=len(cases)) for p in paths]
    present = [rep for rep in reports if rep.path.is_file()]
    for rep in reports:
        if rep not in present:
            rep.load_error = f"no file {rep.path}. Hint: copy the stub from {exercise.stub}"
    if not present:
        return reports
    zyg.prepare(exercise.name)
    run = run_sandbox(zyg, exercise.name, [str(r.path) for r in present], cases, deadline)
    ok = sorted({i for fs in run.frames.values() for i, f in fs.items() if f.get("status") == "ok"})
    died = ""
    try:
        expected = dict(zip(ok, expect_all(exercise, [cases[i] for i in ok], zyg)))
    except ReferenceFailed as exc:
        expected, died = {}, f"ERROR: torch's side of the check failed (no verdict): {exc}"
    for j, rep in enumerate(present):
        rep.load_error, rep.tamper = run.load_errors.get(j, ""), run.tamper.get(j, [])
        frames, rep.output = run.frames.get(j, {}), run.output
        rep.outcomes = [judge(exercise, cases[i], frames[i], expected.get(i))
                        for i in range(len(cases)) if i in frames]  # fmt: skip
        stopped = rep.outcomes and rep.outcomes[-1].status in ("todo", "stuck")
        if died or (len(frames) < len(cases) and not (stopped or rep.load_error or rep.tamper)):
            i = run.died_in[1] if run.died_in and run.died_in[0] == j else None
            at = f"case {i + 1:>2}  {describe(cases[i])}: " if i is not None else ""
            rep.died = died or at + (run.died or "ERROR: the sandbox stopped at a stuck case "
                                     "of another file before this one's: no verdict")  # fmt: skip
        failed = [o for o in rep.outcomes if not o.passed]  # tampering first, then a case
        named = [o for o in failed if o.status == "tamper"] + [o for o in failed if o.hint]
        rep.failure = (named or failed or [None])[0]  # whose mistake the guards named
        if named and named[0].status == "tamper":
            rep.tamper = rep.tamper or [rep.failure.detail]
    if not died:
        _diagnose(exercise, [r for r in present if not r.died], cases, expected, deadline)
    return reports


def check(exercise: Exercise, path: Path | None = None, deadline: float = DEADLINE_S,
          generated: int | None = None) -> Report:  # fmt: skip
    """Check ``path`` (default: the stub) against ``exercise``, in a sandbox of its own."""
    return check_files(exercise, [Path(path or exercise.stub)], deadline, generated)[0]
