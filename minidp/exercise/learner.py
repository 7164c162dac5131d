"""Importing the learner's file: its function, or an error that says what to fix.

Used by the checker in this process (``runner.py``) and by rank processes
(``process_world.py``), which import the same file on their own.

Test: ``pytest tests/test_exercises.py``
"""

from __future__ import annotations

import importlib.util
import re
import traceback
from collections.abc import Callable
from pathlib import Path


class LoadError(Exception):
    pass


def load(path: Path, name: str) -> Callable:
    """Import the learner's file and return its function ``name``."""
    if not path.is_file():
        raise LoadError(f"no file {path}. Hint: copy the stub from lessons/exercises/{name}.py")
    spec = importlib.util.spec_from_file_location(f"minidp_exercise_{name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        line = learner_line(exc, str(path))
        raise LoadError(f"could not import {path}: {type(exc).__name__}: {exc}{line}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise LoadError(f"{path} defines no function {name}(...) — keep the stub's signature")
    return fn


def learner_line(exc: BaseException, path: str) -> str:
    """`` (line N: code)``: the deepest line of the learner's file in the traceback."""
    if hasattr(exc, "traceback_text"):  # from a rank process: only the text is left
        hits = re.findall(rf'File "{re.escape(path)}", line (\d+).*\n\s*(.*)', exc.traceback_text)
        return f" (line {hits[-1][0]}: {hits[-1][1].strip()})" if hits else ""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    return f" (line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
