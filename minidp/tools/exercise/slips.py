"""The classic mistakes. A *slip* is ``lessons/exercises/slips/NAME/WHAT.py``: the exercise's
function with one mistake, its docstring's first line naming it, the rest saying what to
change. The judge runs them on the learner's failing cases and names the one that answers
alike; nothing here knows what a slip does. The checker's own guards name theirs
(:data:`GUARDS`), with their error's own hint."""

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import torch

from minidp.tools.exercise.spec import ROOT, compare


@dataclass(frozen=True)
class Hint:
    """A named mistake: what it is, what to change, and where it is written down."""

    name: str  # "forgot the all-gather"
    text: str  # what to change
    source: str = ""  # the slip's file (from the repository's root), "" for the checker's


def read(path: Path) -> Hint:
    """A slip's hint: its docstring's first line (the name) and the rest (what to change)."""
    name, _, text = (ast.get_docstring(ast.parse(path.read_text())) or path.stem).partition("\n")
    return Hint(name.strip().rstrip("."), " ".join(text.split()), str(path.relative_to(ROOT)))


GUARDS = (  # "TypeName: message" of a rank's error -> the mistake it names
    (r"RefusedCall: \S+ is this exercise's answer", "called the answer"),
    (r"RefusedCall: the \w+ group allows only|Default process group has not been initialized|"
     r"Invalid process group specified", "used a collective the group does not offer"),
    (r"MessageMismatch: message dtypes differ", "receive buffer of another dtype"),
    (r"MessageMismatch: message sizes differ", "message sizes differ"),
    (r"UnwaitedMessage: ", "isend never waited for"),
    (r"UnmatchedMessage: ", "a message nobody received"),
    (r"WrongGroup: ", "used the default group"),
)  # fmt: skip
TAMPERING = Hint("tampering", "code under check reached for what decides the verdict (the "
    "checker's pipe, frames, files or code, the reference solutions, processes left running, "
    "or a group of its own). Your function gets its inputs and its group; the answer must "
    "come from them.")  # fmt: skip


def guard(error: str) -> Hint | None:
    """The mistake a checker's own error names (its hint: the error's own), if it is one."""
    name = next((name for pattern, name in GUARDS if re.search(pattern, error)), None)
    text = error.split("Hint: ", 1)[-1] if "Hint: " in error else error.split(": ", 1)[-1]
    return Hint(name, text.strip()) if name else None


def same(a, b, tol) -> bool:
    """The same error, or equal answers within tolerance (and a narrow float's rounding)."""
    if a.status != b.status:
        return False
    if a.status == "error":  # the first line, without what differs: numbers, quoted names
        plain = lambda e: re.sub(r"'[^']*'", "'?'", re.sub(r"\d+", "#", e.split("\n", 1)[0]))
        return plain(a.error) == plain(b.error)
    if a.results is None or b.results is None or len(a.results) != len(b.results):
        return False

    def within(t: torch.Tensor):
        narrow = t.is_floating_point() and t.dtype != torch.float64
        eps = torch.finfo(t.dtype).eps * 64 if narrow else 0
        return (max(tol[0], eps), max(tol[1], eps)) if tol and eps else tol

    return all(compare(x[0], y[0], within) is None for x, y in zip(a.results, b.results))
