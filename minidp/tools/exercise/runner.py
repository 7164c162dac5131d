"""The judge: the learner's answers from the sandbox, torch's from here, compared here.

A check runs in rounds. A round hands the cases to a fresh sandbox (``isolate.py``),
which runs the learner's function on real gloo ranks and sends back each rank's answer as
data; then every process below the zygote is killed, and only then does the judge compute
torch's answers (``expectations.py``) and compare them with plain tensors rebuilt from
bytes (``spec.compare``). Nothing the learner's code prints, writes or returns can decide
the verdict any other way.

The first round runs the fixed cases, then generated ones (hypothesis, fixed seed: the
same cases every run). A case passes when every rank's answer equals torch's
(``torch.equal``, or the exercise's stated tolerance) and, where the exercise
communicates, each rank sent what the algorithm must send (``Exercise.traffic``). The
smallest failing case is then found by shrinking — a round per step, the candidates of
``inputs.simpler`` (or the exercise's ``shrink``) all in one sandbox — and reported with
the classic mistake it matches.

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from minidp.tools.exercise import wire, zygote
from minidp.tools.exercise.expectations import ReferenceFailed, expect_all
from minidp.tools.exercise.inputs import describe, simpler
from minidp.tools.exercise.isolate import SandboxRun, run_sandbox
from minidp.tools.exercise.learner_group import GROUP_MISTAKES
from minidp.tools.exercise.outcome import TAMPERING, USED_COLLECTIVE, Outcome, Report
from minidp.tools.exercise.spec import Case, Exercise, Mistake, Result, compare

DEADLINE_S = 6.0  # per case: a deadlock is reported after this, naming ranks and lines
GENERATED = 12  # generated cases after the fixed ones
SHRINK_ROUNDS = 3  # sandbox rounds spent shrinking, at most
SHRINK_BUDGET_S = 20.0
SHRINK_CANDIDATES = 40  # per round


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


def generated_cases(exercise: Exercise, n: int) -> list[Case]:
    """``n`` cases drawn from the exercise's strategy (derandomized: the same every run)."""
    n = min(n, exercise.generated if exercise.generated is not None else n)
    if not n or exercise.strategy is None:
        return []
    try:
        from hypothesis import HealthCheck, Phase, find, settings
        from hypothesis.errors import NoSuchExample
    except ImportError:  # hypothesis is a dev extra: the fixed cases still run
        return []
    drawn: list[Case] = []

    def collect(case: Case) -> bool:
        if case not in drawn and case not in exercise.cases:
            drawn.append(dict(case))
        return False

    cfg = settings(max_examples=n, derandomize=True, database=None, deadline=None,
                   phases=[Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
    try:
        find(exercise.strategy(), collect, settings=cfg)
    except NoSuchExample:
        pass
    return drawn[:n]


def _warm(exercise: Exercise) -> None:
    if exercise.prepare is not None and not exercise.reference_processes:  # (else: forked)
        try:
            exercise.prepare(0, 1)
        except Exception:  # a warm-up only: torch's side will raise what is real
            pass


class Judge:
    """Runs rounds of cases for one exercise and one file, and judges every answer."""

    def __init__(self, exercise: Exercise, path: Path, deadline: float) -> None:
        self.exercise, self.path, self.deadline = exercise, path, deadline
        self.zygote = zygote.shared()
        # the judge's own first uses (torch._dynamo for an optimizer: a second or more)
        # warm up while the zygote and the sandbox work; joined before torch's side runs
        self._warm = threading.Thread(target=_warm, args=(exercise,), daemon=True)
        self._warm.start()
        self.zygote.prepare(exercise.name)
        self.tamper: list[str] = []
        self.runs: list[SandboxRun] = []

    def round(self, cases: list[Case]) -> list[Outcome]:
        """One sandbox for ``cases``; the outcomes of those it answered, in order."""
        run = run_sandbox(self.zygote, self.exercise.name, str(self.path), cases, self.deadline)
        self.runs.append(run)
        if run.load_error:
            self.tamper += [f for f in run.tamper if f not in self.tamper]
            return []
        self._warm.join()
        ok = [i for i in sorted(run.frames) if run.frames[i].get("status") == "ok"]
        expected = dict(zip(ok, expect_all(self.exercise, [cases[i] for i in ok], self.zygote)))
        outcomes, seen = [], set(self.tamper)
        for i, case in enumerate(cases):
            frame = run.frames.get(i)
            if frame is None:
                if run.ended == "stuck" and run.died_in == i:
                    outcomes.append(Outcome(case, "stuck", run.died))
                break
            new = [f for f in run.tamper if f not in seen and f in frame.get("tamper", [])]
            seen.update(new)
            if new:
                outcomes.append(Outcome(case, "tamper", "\n".join(new), mistake=TAMPERING))
                continue
            outcomes.append(self._judge(case, frame, expected.get(i)))
        self.tamper += [f for f in run.tamper if f not in self.tamper]
        return outcomes

    def _judge(self, case: Case, frame: dict, expected) -> Outcome:
        status = frame.get("status")
        detail = (
            wire.decode(frame.get("detail", "")) if isinstance(frame.get("detail"), str) else ""
        )
        if status == "todo":
            return Outcome(case, "todo", "not implemented yet")
        if status == "stuck":
            return Outcome(case, "stuck", detail)
        if status == "error":
            what = str(frame.get("type", "Error"))[:100]
            return Outcome(case, "error", detail, mistake=self._diagnose_error(
                str(frame.get("error", ""))), error=what)  # fmt: skip
        try:
            ranks = frame["ranks"]
            answers = [(wire.decode(r["got"]), wire.decode(r["seen"])) for r in ranks]
            if len(answers) != case["world"] or not all(isinstance(s, dict) for _, s in answers):
                raise wire.Malformed(f"{len(answers)} answers for {case['world']} ranks")
        except (KeyError, TypeError, wire.Malformed) as exc:
            text = f"the sandbox sent a malformed answer ({exc})"
            return Outcome(case, "tamper", text, mistake=TAMPERING)
        results = [Result(got, e.expected, {**e.extra, **seen})
                   for (got, seen), e in zip(answers, expected)]  # fmt: skip
        tol = self.exercise.tolerance(case) if self.exercise.tolerance else None
        for rank, res in enumerate(results):
            why = compare(res.got, res.expected, tol, res.extra.get("labels"))
            if why:
                return Outcome(
                    case, "wrong", f"rank {rank}: {why}", results, self._diagnose(case, results)
                )
        return self._traffic(case, results) or Outcome(case, "pass", "", results)

    def _traffic(self, case: Case, results: list[Result]) -> Outcome | None:
        """Right values: did each rank send what the algorithm must, through its group?"""
        t, world = self.exercise.traffic, case["world"]
        counts = [r.extra.get("traffic") for r in results]
        if t is None or world < 2 or not all(isinstance(c, dict) for c in counts):
            return None
        sent = [int(c.get("bytes", 0)) for c in counts]
        if t.p2p_only and any(c.get("headers", 0) for c in counts):
            rank = next(r for r, c in enumerate(counts) if c.get("headers", 0))
            text = f"rank {rank}: right values, but {counts[rank]['headers']} header messages"
            return Outcome(case, "wrong", text + " came first", results, USED_COLLECTIVE)
        for rank, (least, most) in enumerate(t.bounds(case, world)):
            if sent[rank] < least:
                text = (
                    f"rank {rank}: right values, but only {sent[rank]} bytes went through the "
                    f"group it was given, where {t.formula} is {least} bytes here — the values "
                    "did not travel through the group (another rank's memory, a group of its "
                    "own?)"
                )
                return Outcome(case, "tamper", text, results, TAMPERING)
            if most is not None and sent[rank] > most:
                text = (f"rank {rank}: right values, but it sent {sent[rank]} bytes; "
                        f"{t.formula} is {most} bytes here")  # fmt: skip
                return Outcome(case, "wrong", text, results, t.too_much)
        if t.total is not None:
            least, most = t.total(case, world)
            if not least <= sum(sent) <= most:
                text = (f"right values, but the ranks sent {sum(sent)} bytes in all; "
                        f"{t.formula} is {least}..{most} bytes here")  # fmt: skip
                return Outcome(case, "wrong", text, results, t.too_much)
        return None

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

    def _diagnose_error(self, text: str) -> Mistake | None:
        """The classic mistake a rank's error shows ("TypeName: message"), from the
        exercise's ``raised`` patterns, then the learner group's own."""
        for mistake in (*self.exercise.mistakes, *GROUP_MISTAKES):
            if mistake.raised and re.search(mistake.raised, text):
                return mistake
        return None

    def shrink(self, outcome: Outcome) -> tuple[Outcome, int]:
        """The smallest case failing the same way: greedy, one sandbox round per step."""
        if outcome.status not in ("wrong", "error"):  # a stuck try costs a deadline
            return outcome, 0
        best, tries, end = outcome, 0, time.monotonic() + SHRINK_BUDGET_S
        for _ in range(SHRINK_ROUNDS):
            candidates: list[Case] = []
            for c in (self.exercise.shrink or simpler)(best.case):
                if c not in candidates and len(candidates) < SHRINK_CANDIDATES:
                    candidates.append(c)
            if not candidates or time.monotonic() > end:
                break
            outcomes = self.round(candidates)
            tries += len(outcomes)
            smaller = next((o for o in outcomes if o.same_failure(best)), None)
            if smaller is None:
                break
            best = smaller
        return best, tries


def _pick_failure(exercise: Exercise, outcomes: list[Outcome]) -> Outcome | None:
    """The first failing fixed case — or the first whose classic mistake was recognised —
    else the first failing generated case; a tampering case before all."""
    tampered = next((o for o in outcomes if o.status == "tamper"), None)
    if tampered is not None:
        return tampered
    failed = None
    for o in outcomes[: len(exercise.cases)]:
        if not o.passed and (failed is None or (o.mistake and not failed.mistake)):
            failed = o
    return failed or next((o for o in outcomes if not o.passed), None)


def check(
    exercise: Exercise,
    path: Path | None = None,
    deadline: float = DEADLINE_S,
    generated: int = GENERATED,
    on_case: Callable[[int, Outcome], None] | None = None,
    on_start: Callable[[int, Case], None] | None = None,
) -> Report:
    """Check ``path`` (default: the stub) against ``exercise``.

    ``on_start(i, case)`` then ``on_case(i, outcome)`` are called for each case judged,
    in order, once the first round is over.
    """
    check_settings(deadline, generated)
    path = Path(path or exercise.stub).resolve()
    report = Report(exercise, path)
    if not path.is_file():
        report.load_error = f"no file {path}. Hint: copy the stub from {exercise.stub}"
        return report
    zygote.shared()  # it starts importing torch now, while the cases are drawn
    machine = exercise.plan() if exercise.plan else {}  # e.g. {"cuda": 1}: decided here
    cases = [{**c, **machine} for c in [*exercise.cases, *generated_cases(exercise, generated)]]
    report.cases = len(cases)
    judge = Judge(exercise, path, deadline)
    try:
        report.outcomes = judge.round(cases)
    except ReferenceFailed as exc:
        report.died = f"ERROR: torch's side of the check failed (no verdict): {exc}"
    first = judge.runs[0]
    report.load_error, report.output = first.load_error, first.output
    report.died = report.died or (first.died if first.ended in ("eof", "malformed") else "")
    report.died_in = first.died_in
    if report.died and first.died_in is not None:  # the case it happened in, by its line
        at = f"case {first.died_in + 1:>2}  {describe(cases[first.died_in])}"
        report.died = f"{at}: {report.died}"
    for i, o in enumerate(report.outcomes):
        if on_start:
            on_start(i + 1, o.case)
        if on_case:
            on_case(i + 1, o)
    failed = _pick_failure(exercise, report.outcomes)
    if failed is not None and not report.died and not judge.tamper:
        try:
            report.failure, report.shrink_tries = judge.shrink(failed)
        except ReferenceFailed:
            report.failure = failed
        if report.failure.case != failed.case:
            report.shrunk_from = failed.case
    else:
        report.failure = failed
    report.tamper = list(judge.tamper)
    return report
