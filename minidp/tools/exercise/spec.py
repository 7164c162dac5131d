"""What an exercise is: ``learn(fn, case, rank, world, group)`` runs in the sandbox (builds
this rank's inputs, calls the learner's ``fn``), ``expect(case, rank, world, group)`` in the
judge (the same inputs through torch); and how answers compare. Adding one: the README in
``lessons/exercises/``."""

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[3]
STUBS = ROOT / "lessons" / "exercises"  # what the learner edits; its slips/ beside it
SOLUTIONS = ROOT / "lessons" / "solutions"


@dataclass(frozen=True)
class Expected:
    """torch's answer for one rank; names of a list's items; bytes (least, most) it may send."""

    value: Any
    labels: list[str] | None = None
    traffic: tuple[int, int] | None = None


@dataclass(frozen=True)
class Traffic:
    """Bytes per rank: ``bounds(case, world) -> [(least, most | None)]`` (or ``Expected``'s)."""

    bounds: Callable[[dict, int], list[tuple[int, int | None]]] | None
    formula: str


@dataclass(frozen=True)
class Exercise:
    """Fixed ``cases`` (smallest first), then ``generated`` by ``draw(rng)``; ``tolerance`` where
    bits cannot match; ``(reference_)processes``: that side needs rank processes; ``answers``:
    refused in the sandbox; ``diagnose``: failing cases the slips run on; ``plan()``: keys
    about the machine, added to every case; ``prepare``: once, in the zygote."""

    reference: str
    learn: Callable[..., Any]
    expect: Callable[..., Any]
    cases: tuple[dict, ...]
    draw: Callable[[random.Random], dict] | None = None
    generated: int = 8
    tolerance: Callable[[dict], tuple[float, float] | None] | None = None
    processes: bool = False
    reference_processes: bool = False
    prepare: Callable[[], None] | None = None
    traffic: Traffic | None = None
    answers: tuple[str, ...] = ()
    diagnose: int = 4
    plan: Callable[[], dict] | None = None
    name: str = ""  # these three come from the catalogue
    lesson: str = ""
    summary: str = ""

    @property
    def stub(self) -> Path:
        return STUBS / f"{self.name}.py"

    @property
    def solution(self) -> Path:
        return SOLUTIONS / f"{self.name}.py"

    @property
    def slips(self) -> list[Path]:
        return sorted((STUBS / "slips" / self.name).glob("*.py"))


def compare(got: Any, expected: Any, tol, labels: list[str] | None = None) -> str | None:
    """None if ``got`` matches, else why not; ``tol``: (rtol, atol), None (bits), or a function."""
    if isinstance(expected, torch.Tensor):
        tol = tol(expected) if callable(tol) else tol
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {getattr(got, 'type_name', type(got).__name__)}"
        if got.shape != expected.shape or got.dtype != expected.dtype:
            e, g = (f"{tuple(t.shape)} {t.dtype}" for t in (expected, got))
            return f"expected shape {e}, got {g}"
        if tol is None:
            if torch.equal(got, expected):
                return None
            differ = (got != expected).reshape(-1).nonzero()
            if not len(differ):  # equal values, other bits
                return "values differ (same numbers, different bits: -0.0 or nan?)"
            return _at(int(differ[0]), got, expected, "values differ at element")
        try:
            torch.testing.assert_close(got, expected, rtol=tol[0], atol=tol[1], equal_nan=True)
            return None
        except AssertionError:
            far = (got.double() - expected.double()).abs().reshape(-1).nan_to_num(float("inf"))
            what = f"values differ beyond rtol={tol[0]:g}, atol={tol[1]:g}; most at element"
            return _at(int(far.argmax()), got, expected, what)
    if isinstance(expected, (list, tuple)):
        if all(isinstance(e, (bool, int, float, str, type(None))) for e in expected):
            return None if isinstance(got, (list, tuple)) and list(got) == list(expected) else (
                f"expected {list(expected)}, got {got!r}")  # fmt: skip
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            n = len(got) if isinstance(got, (list, tuple)) else type(got).__name__
            return f"expected a list of {len(expected)}, got {n}"
        for i, (a, b) in enumerate(zip(got, expected)):
            why = compare(a, b, tol)
            if why:
                return f"item {i}{f' ({labels[i]})' if labels and i < len(labels) else ''}: {why}"
        return None
    if isinstance(expected, float):
        got = got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            return f"expected a number, got {type(got).__name__}"
        return compare(*(torch.tensor(float(v), dtype=torch.float64) for v in (got, expected)), tol)
    return None if got == expected else f"expected {expected!r}, got {got!r}"


def _at(flat: int, got: torch.Tensor, expected: torch.Tensor, what: str) -> str:
    where = torch.unravel_index(torch.tensor(flat), got.shape) if got.dim() else []
    e, g = expected.reshape(-1)[flat].item(), got.reshape(-1)[flat].item()
    return f"{what} {[int(k) for k in where]}: expected {e!r}, got {g!r}"
