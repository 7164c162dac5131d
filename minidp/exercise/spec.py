"""What an exercise is: a plain record the runner reads (no registry, no base class).

An :class:`Exercise` says where the learner's function lives (``lessons/exercises/NAME.py``,
a function called ``NAME``), which cases to run it on, how one rank runs it *and* the
official torch component on the same inputs (``run_rank``), and which classic mistakes to
recognise when the answers differ (``mistakes``). See ``minidp/exercise/__init__.py`` for
how to add one.

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "lessons" / "exercises"  # what the learner edits
SOLUTIONS = ROOT / "lessons" / "solutions"  # reference solutions (the checker's own test)

Case = dict  # one case: {"world": 3, "shape": (5,), "dtype": "int64", "seed": 0, ...}


@dataclass
class Result:
    """What one rank hands back for one case."""

    got: Any  # the learner's answer on this rank
    expected: Any  # the official torch component's answer, same inputs, same rank
    extra: dict = field(default_factory=dict)  # anything a mistake detector needs (inputs...)


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
class Budget:
    """How many payload bytes one rank may send: right values moved wastefully still fail.

    ``limit(case, world)``: the most any rank sends in the algorithm the exercise teaches;
    ``formula``: that limit in words, printed with it; ``mistake``: what sending more means.
    """

    limit: Callable[[Case, int], int]
    formula: str
    mistake: Mistake


@dataclass(frozen=True)
class Exercise:
    """One exercise: the learner writes ``NAME(...)`` in ``lessons/exercises/NAME.py``.

    Args:
        name: the file stem and the function name.
        lesson: the lesson file that teaches it, e.g. "08_ring_all_reduce".
        summary: one line for ``python -m minidp exercise list``.
        reference: what the answer is compared with, printed with every case.
        run_rank: ``run_rank(fn, case, rank, world_size, group) -> Result``, called on every
            rank of a real gloo world: build this rank's inputs from the case, run the
            official torch component and the learner's ``fn`` on them, return both.
        cases: fixed cases, run first and printed one per line (smallest first).
        strategy: ``() -> hypothesis strategy of cases`` for generated cases (or None).
        mistakes: classic wrong solutions, tried in order when a case fails.
        tolerance: ``case -> (rtol, atol)`` where bit-exactness is not the claim; None
            compares with ``torch.equal``.
        processes: run on real rank processes (``ProcessWorld``) instead of thread ranks
            (needed e.g. for torch DDP, which wants a full ProcessGroup).
        shrink: ``case -> smaller cases`` for shrinking, where :func:`simpler` (world,
            shape, dtype, seed, rank-valued keys) does not fit the case's keys.
        prepare: ``(rank, world_size) -> None``, run once on every new world before its
            first case, outside the case deadline: slow first uses (torch DDP and
            optimizers import ``torch._dynamo``, seconds) must not read as a deadlock.
            Module-level, so rank processes can receive it.
        budget: payload bytes a rank may send (thread ranks only, where the learner's
            group counts them); a right answer that sends more fails with its mistake.
    """

    name: str
    lesson: str
    summary: str
    reference: str
    run_rank: Callable[[Callable, Case, int, int, Any], Result]
    cases: tuple[Case, ...]
    strategy: Callable[[], Any] | None = None
    mistakes: tuple[Mistake, ...] = ()
    tolerance: Callable[[Case], tuple[float, float]] | None = None
    processes: bool = False
    shrink: Callable[[Case], Iterable[Case]] | None = None
    prepare: Callable[[int, int], None] | None = None
    budget: Budget | None = None

    @property
    def stub(self) -> Path:
        return STUBS / f"{self.name}.py"

    @property
    def solution(self) -> Path:
        return SOLUTIONS / f"{self.name}.py"


# ----------------------------------------------------------------------------- cases


def describe(case: Case) -> str:
    """``world=3 shape=(5,) dtype=int64 seed=0`` — how a case is printed (this key order)."""
    first = [k for k in ("world", "shape", "dtype", "seed") if k in case]
    return " ".join(f"{k}={case[k]}" for k in first + sorted(set(case) - set(first)))


def dtype_of(case: Case) -> torch.dtype:
    return getattr(torch, case.get("dtype", "float32"))


def small_ints(case: Case, rank: int, salt: int = 0) -> torch.Tensor:
    """This rank's input: small integers (-3..3, uint8 0..3) stored in the case's dtype.

    Why integers, even for floats: every summation order then gives the same bits, so a
    correct answer equals the torch component's exactly (``torch.equal``), whatever order
    the learner adds in; |sums| stay <= 3 * world, exact in every dtype incl. int8/fp16.
    """
    dtype = dtype_of(case)
    g = torch.Generator().manual_seed(case.get("seed", 0) * 1009 + rank * 31 + salt)
    low = 0 if dtype == torch.uint8 else -3
    shape = tuple(case.get("shape", (case.get("numel", 4),)))
    return torch.randint(low, 4, shape, generator=g).to(dtype)


RANK_KEYS = ("src", "dst", "root")  # case keys holding a rank: kept below the world size


def simpler(case: Case) -> Iterable[Case]:
    """Candidate cases smaller than ``case``, most promising first (for shrinking)."""
    for w in range(1, case.get("world", 1)):
        yield {**case, "world": w, **{k: min(case[k], w - 1) for k in RANK_KEYS if k in case}}
    for k in RANK_KEYS:
        if case.get(k, 0) > 0:
            yield {**case, k: 0}
    shape = tuple(case.get("shape", ()))
    for i, n in enumerate(shape):
        for smaller in sorted({0, 1, n // 2, n - 1}):
            if 0 <= smaller < n:
                yield {**case, "shape": shape[:i] + (smaller,) + shape[i + 1 :]}
    if len(shape) > 1:
        yield {**case, "shape": (int(torch.Size(shape).numel()),)}
    if case.get("dtype") not in (None, "int64"):
        yield {**case, "dtype": "int64"}
    if case.get("seed", 0) != 0:
        yield {**case, "seed": 0}


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
            return f"expected a tensor, got {type(got).__name__}"
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
            n = len(got) if isinstance(got, (list, tuple)) else type(got).__name__
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
            return f"expected a number, got {type(got).__name__}"
        got_t = torch.tensor(float(got), dtype=torch.float64)
        exp_t = torch.tensor(expected, dtype=torch.float64)
        return compare(got_t, exp_t, tol)
    return None if got == expected else f"expected {expected!r}, got {got!r}"


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
