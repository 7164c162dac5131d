"""What the launchers check before starting a world, so that bad arguments fail in one line.

Test: ``pytest tests/test_reliability_launch.py``

``world_size`` an int >= 1, ``timeout`` finite seconds > 0 (else a C++ error from gloo);
the call under ``if __name__ == "__main__":`` (each rank re-imports the main script); a
rank function a fresh process can import (not one from ``python -c`` or a notebook cell).
"""

from __future__ import annotations

import ast
import inspect
import math
import os
import sys
from typing import Any


def check_world_size(launcher: str, world_size: Any) -> int:
    """``world_size`` as an int >= 1, or a TypeError / ValueError that says what to pass."""
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        hint = f"world_size={int(world_size)}" if _is_whole(world_size) else "world_size=2"
        raise TypeError(
            f"{launcher}: world_size must be an int (the number of ranks), got "
            f"{world_size!r} ({type(world_size).__name__}) — pass e.g. {hint}"
        )
    if world_size < 1:
        raise ValueError(
            f"{launcher}: world_size must be >= 1, got {world_size} — pass the number of ranks"
        )
    return world_size


def check_timeout(launcher: str, timeout: Any, name: str = "timeout") -> float:
    """``timeout`` in seconds as a finite float > 0, or an error that says what to pass."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(
            f"{launcher}: {name} must be a number of seconds, got {timeout!r} "
            f"({type(timeout).__name__}) — pass e.g. {name}=60 (the default)"
        )
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(
            f"{launcher}: {name} must be a finite number of seconds > 0, got {timeout!r} — "
            f"a collective needs a deadline to report a stalled rank; pass e.g. {name}=60, "
            f"or a large number such as {name}=86400 to wait a day"
        )
    return float(timeout)


def _is_whole(value: Any) -> bool:
    try:
        return float(value) == int(float(value)) >= 1
    except (TypeError, ValueError, OverflowError):
        return False


def _main_module_file() -> str | None:
    """The main script's path, or None when ``__main__`` is not a file (REPL, -c, notebook)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return path if path and os.path.isfile(path) else None


def check_importable(launcher: str, fn: Any) -> None:
    """Refuse a rank function a spawned process cannot import (``__main__`` not a file)."""
    if getattr(fn, "__module__", None) != "__main__":
        return
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None or _main_module_file():
        return
    name = getattr(fn, "__qualname__", repr(fn))
    raise RuntimeError(
        f"{launcher}: {name!r} is defined in __main__ of an interactive session (python -c, "
        f"stdin or a notebook cell), which rank processes cannot import — they start fresh "
        f"and import fn by module and name; put {name!r} in a .py file and import it from "
        f"there, or use minidp.launch.run_threads (threads share this interpreter)"
    )


def check_main_guard(launcher: str) -> None:
    """Refuse a call from the main script's top level outside the ``__main__`` guard."""
    path = _main_module_file()
    frame = inspect.currentframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            break
        frame = frame.f_back
    if frame is None or path is None or not _same_file(frame.f_code.co_filename, path):
        return  # not the main script's top level (a notebook cell's "file" does not exist)
    line = frame.f_lineno
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                return
    raise RuntimeError(
        f"{launcher}: called at the top level of {os.path.basename(path)} (line {line}) "
        f'without `if __name__ == "__main__":` — every rank process re-imports the script '
        f"and would start ranks again; move the call under that guard"
    )


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # e.g. a notebook cell, compiled from a file name that does not exist
        return False


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round), alone or in an ``and``."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_is_main_test(value) for value in test.values)
    if not isinstance(test, ast.Compare) or len(test.comparators) != 1:
        return False
    sides = [test.left, test.comparators[0]]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    consts = {s.value for s in sides if isinstance(s, ast.Constant)}
    return names == {"__name__"} and consts == {"__main__"} and isinstance(test.ops[0], ast.Eq)
