"""What an exercise is: a plain record the checker reads (no registry, no base class).

An :class:`Exercise` says where the learner's function lives (``lessons/exercises/NAME.py``,
a function called ``NAME``), which cases to run it on, and two halves of one case that
run in two different processes:

* ``learn(fn, case, rank, world, group) -> Answer`` runs in the **sandbox**, the process
  that holds the learner's code (``sandbox.py``): it builds this rank's inputs from the
  case, calls ``fn`` and returns what came back (``got``) and what the checker saw around
  the call (``seen``: bytes sent, whether a bucket left early, ...). Nothing it holds
  knows the right answer.
* ``expect(case, rank, world, group) -> Expected`` runs in the **judge** (or a reference
  worker it forks) once the sandbox is gone: the same inputs through the official torch
  component, and what the classic mistakes' detectors need (``extra``).

The judge puts them together as a :class:`Result` per rank and compares
(:func:`compare`); ``mistakes`` name what a wrong answer looks like. See
``minidp/tools/exercise/__init__.py`` for how to add an exercise; inputs: ``inputs.py``.

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from minidp.tools.exercise.inputs import Case, describe  # noqa: F401  (re-exported: the record's words)

ROOT = Path(__file__).resolve().parents[3]
STUBS = ROOT / "lessons" / "exercises"  # what the learner edits
SOLUTIONS = ROOT / "lessons" / "solutions"  # reference solutions (the checker's own test)


@dataclass
class Answer:
    """What the sandbox hands back for one rank of one case (plain data and tensors)."""

    got: Any  # the learner's answer on this rank
    seen: dict = field(default_factory=dict)  # measured around the call (traffic, timeline)


@dataclass
class Expected:
    """What the judge computes for one rank of one case with torch's component."""

    expected: Any
    extra: dict = field(default_factory=dict)  # what mistake detectors need (inputs, slips)


@dataclass
class Result:
    """One rank's answer beside its expected value, as the judge compares them."""

    got: Any
    expected: Any
    extra: dict = field(default_factory=dict)  # the reference's extra and the sandbox's seen


@dataclass(frozen=True)
class Mistake:
    """A classic wrong solution, recognised from the answers it gives (``matches``) or,
    for one that raises, from the error it raises (``raised``, a regex searched in
    "TypeName: message" of the root error)."""

    name: str  # short: "forgot the all-gather"
    hint: str  # what to change, in one or two sentences
    matches: Callable[[Case, list[Result]], bool] | None = None  # (case, results) -> is it?
    raised: str = ""  # e.g. r"RuntimeError: .*doesn't require gradient"


@dataclass(frozen=True)
class Traffic:
    """The payload bytes each rank must send through the group it was given.

    ``bounds(case, world)``: per rank ``(least, most)`` (``most`` None: no upper bound).
    Fewer than ``least`` bytes with right values means the values did not travel through
    the group (tampering); more than ``most`` is ``too_much`` (right values moved
    wastefully). ``total(case, world)``: ``(least, most)`` over all ranks, or None.
    ``p2p_only``: the exercise is a collective, built from send/recv — the header messages
    minidp's own collectives exchange first mean one of them was called.
    """

    bounds: Callable[[Case, int], list[tuple[int, int | None]]]
    formula: str
    too_much: Mistake | None = None
    total: Callable[[Case, int], tuple[int, int]] | None = None
    p2p_only: bool = False


@dataclass(frozen=True)
class Exercise:
    """One exercise: the learner writes ``NAME(...)`` in ``lessons/exercises/NAME.py``.

    Args:
        name: the file stem and the function name.
        lesson: the lesson file that teaches it, e.g. "08_ring_all_reduce".
        summary: one line for ``python -m minidp exercise list``.
        reference: what the answer is compared with, printed with every check.
        learn: ``learn(fn, case, rank, world, group) -> Answer`` (sandbox, see above).
        expect: ``expect(case, rank, world, group) -> Expected`` (judge, see above).
        cases: fixed cases, run first and printed one per line (smallest first).
        strategy: ``() -> hypothesis strategy of cases`` for generated cases (or None).
        mistakes: classic wrong solutions, tried in order when a case fails.
        tolerance: ``case -> (rtol, atol)`` where bit-exactness is not the claim; None
            compares with ``torch.equal``.
        processes: ``learn`` needs real rank processes (torch DDP on the learner's side).
        reference_processes: ``expect`` needs real rank processes (torch DDP, ZeRO).
        shrink: ``case -> smaller cases`` where :func:`inputs.simpler` does not fit.
        prepare: ``(rank, world_size) -> None``: slow first imports (``torch._dynamo``),
            run once in the zygote so that every process forked from it has them.
        traffic: the bytes each rank must send (:class:`Traffic`), for every exercise
            that communicates on thread ranks.
        answers: dotted names of what *is* the answer (``minidp.textbook.collectives``'s ring,
            torch's own sampler...): the sandbox makes them unavailable.
        generated: at most this many generated cases (rank processes cost time).
        plan: ``() -> dict`` of keys about this machine added to every case, asked in the
            judge (``{"cuda": 1}`` where the reference also runs on a GPU).
    """

    name: str
    lesson: str
    summary: str
    reference: str
    learn: Callable[..., Answer]
    expect: Callable[..., Expected]
    cases: tuple[Case, ...]
    strategy: Callable[[], Any] | None = None
    mistakes: tuple[Mistake, ...] = ()
    tolerance: Callable[[Case], tuple[float, float]] | None = None
    processes: bool = False
    reference_processes: bool = False
    shrink: Callable[[Case], Iterable[Case]] | None = None
    prepare: Callable[[int, int], None] | None = None
    traffic: Traffic | None = None
    answers: tuple[str, ...] = ()
    generated: int | None = None
    plan: Callable[[], dict] | None = None

    @property
    def stub(self) -> Path:
        return STUBS / f"{self.name}.py"

    @property
    def solution(self) -> Path:
        return SOLUTIONS / f"{self.name}.py"


# ----------------------------------------------------------------------------- answers


def compare(
    got: Any, expected: Any, tol: tuple[float, float] | None, labels: list[str] | None = None
) -> str | None:
    """None if ``got`` matches ``expected``; otherwise why not, in a few words.

    ``labels``: names of the items of a list answer (``["output", "loss", ...]``), so a
    difference reads "item 2 (0.weight's gradient), element [1, 0]: ...".
    """
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {_type_name(got)}"
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return (
                f"expected shape {tuple(expected.shape)} {expected.dtype}, "
                f"got {tuple(got.shape)} {got.dtype}"
            )
        if tol is None:
            return None if torch.equal(got, expected) else _first_difference(got, expected)
        try:
            torch.testing.assert_close(got, expected, rtol=tol[0], atol=tol[1], equal_nan=True)
        except AssertionError:
            far = (got.double() - expected.double()).abs().reshape(-1)
            i = int(far.nan_to_num(float("inf")).argmax()) if far.numel() else 0
            where = _index(i, got)
            e, g = expected.reshape(-1)[i].item(), got.reshape(-1)[i].item()
            return (
                f"values differ beyond rtol={tol[0]:g}, atol={tol[1]:g}; most at element "
                f"{where}: expected {e!r}, got {g!r}"
            )
        return None
    plain = (bool, int, float, str)
    if isinstance(expected, (list, tuple)) and all(isinstance(e, plain) for e in expected):
        # a short list of numbers (bucket sizes, indices): shown whole
        if isinstance(got, (list, tuple)) and list(got) == list(expected):
            return None
        return f"expected {list(expected)}, got {got!r}"
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            n = len(got) if isinstance(got, (list, tuple)) else _type_name(got)
            return f"expected a list of {len(expected)}, got {n}"
        for i, (a, b) in enumerate(zip(got, expected)):
            why = compare(a, b, tol)
            if why:
                name = f" ({labels[i]})" if labels and i < len(labels) else ""
                return f"item {i}{name}: {why}"
        return None
    if isinstance(expected, float):
        if not isinstance(got, (int, float)) and not (
            isinstance(got, torch.Tensor) and got.numel() == 1
        ):
            return f"expected a number, got {_type_name(got)}"
        got_t = torch.tensor(float(got), dtype=torch.float64)
        exp_t = torch.tensor(expected, dtype=torch.float64)
        return compare(got_t, exp_t, tol)
    return None if got == expected else f"expected {expected!r}, got {got!r}"


def _type_name(x: Any) -> str:
    """The learner's type's name (``wire.Opaque`` carries it for objects that are not data)."""
    return getattr(x, "type_name", type(x).__name__)


def _first_difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    """``values differ at [i, j]: expected 3, got 5`` — where to start looking."""
    diff = (got != expected).reshape(-1).nonzero()
    if not len(diff):  # equal values, other bits (e.g. -0.0 vs 0.0, or nan)
        return "values differ (same numbers, different bits: -0.0 or nan?)"
    i = int(diff[0])
    e, g = expected.reshape(-1)[i].item(), got.reshape(-1)[i].item()
    return f"values differ at element {_index(i, got)}: expected {e!r}, got {g!r}"


def _index(flat: int, t: torch.Tensor) -> list[int]:
    """The multi-index of flat position ``flat`` in ``t`` ([] for a 0-dim tensor)."""
    if not t.dim():
        return []
    return [int(k) for k in torch.unravel_index(torch.tensor(flat), t.shape)]


def same(a: Any, b: Any) -> bool:
    """Bit-for-bit the same answer (for mistake detectors)."""
    return compare(a, b, None) is None


def everywhere(results: list[Result], test: Callable[[int, Result], bool]) -> bool:
    """The answer is wrong somewhere, and ``test(rank, result)`` holds on every rank."""
    wrong = any(not same(r.got, r.expected) for r in results)
    return wrong and all(test(rank, r) for rank, r in enumerate(results))
