"""Importing the learner's file: its function, or an error that says what to fix.

Used by the sandbox (``sandbox.py``), once, before the first case: rank processes it forks
later inherit the function.

The import is the learner's code too, so it gets what a case gets: a deadline (a loop at
module level is reported with the line it spins at, not waited for) and no way out
(``sys.exit()`` at import is an import error, not the end of the check).

Test: ``pytest tests/test_exercises.py tests/test_exercise_guards.py``
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import threading
import traceback
from collections.abc import Callable
from pathlib import Path


class LoadError(Exception):
    pass


class ImportStopped(BaseException):
    """Raised into an import thread still running at the deadline, to end it."""


def load(path: Path, name: str, deadline: float | None = None) -> Callable:
    """Import the learner's file and return its function ``name``.

    ``deadline``: seconds the import may take (None: no limit, in a rank process whose
    case deadline already covers it).
    """
    if not path.is_file():
        raise LoadError(f"no file {path}. Hint: copy the stub from lessons/exercises/{name}.py")
    spec = importlib.util.spec_from_file_location(f"minidp_exercise_{name}", path)
    module = importlib.util.module_from_spec(spec)
    if deadline is None:
        _run_module(spec, module, path)
    else:
        _run_module_with_deadline(spec, module, path, deadline)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise LoadError(f"{path} defines no function {name}(...) — keep the stub's signature")
    return fn


def _run_module(spec, module, path: Path) -> None:
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:  # BaseException: must not end the check as "exit 0"
        line = learner_line(exc, str(path))
        raise LoadError(
            f"could not import {path}: it called sys.exit({exc.code!r}) while being imported"
            f"{line}. Hint: the checker imports your file and calls your function — remove "
            "the exit (put script code under `if __name__ == '__main__':`)"
        ) from None
    except Exception as exc:  # (ImportStopped, a BaseException, goes through)
        line = learner_line(exc, str(path))
        raise LoadError(f"could not import {path}: {type(exc).__name__}: {exc}{line}") from exc


def _run_module_with_deadline(spec, module, path: Path, deadline: float) -> None:
    """Import in a helper thread; past ``deadline`` report where it is and stop it."""
    from minidp.tools.exercise.world import where  # here: world imports this module's neighbours

    box: list = []

    def target() -> None:
        try:
            _run_module(spec, module, path)
            box.append(None)
        except ImportStopped:
            pass
        except BaseException as exc:  # handed over to the caller's thread
            box.append(exc)

    thread = threading.Thread(target=target, name="minidp-exercise-import", daemon=True)
    thread.start()
    thread.join(deadline)
    if thread.is_alive():
        at = where(thread, str(path))
        for _ in range(20):  # stop it: a loop in Python code ends at its next bytecode
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(thread.ident), ctypes.py_object(ImportStopped)
            )
            thread.join(0.1)
            if not thread.is_alive():
                break
        raise LoadError(
            f"could not import {path}: the import did not finish within {deadline:g}s, "
            f"still running at {at}. Hint: code at module level runs when the checker "
            "imports your file — a loop there never lets it reach your function; move it "
            "into the function or under `if __name__ == '__main__':`"
        )
    if box and box[0] is not None:
        raise box[0]


def learner_line(exc: BaseException, path: str) -> str:
    """`` (line N: code)``: the deepest line of the learner's file in the traceback."""
    if hasattr(exc, "traceback_text"):  # from a rank process: only the text is left
        hits = re.findall(rf'File "{re.escape(path)}", line (\d+).*\n\s*(.*)', exc.traceback_text)
        return f" (line {hits[-1][0]}: {hits[-1][1].strip()})" if hits else ""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    return f" (line {frames[-1].lineno}: {frames[-1].line})" if frames else ""
