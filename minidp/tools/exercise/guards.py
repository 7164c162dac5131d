"""What the sandbox refuses and watches while the learner's code runs.

These guards live in the learner's own process, so they are not what makes a grade
trustworthy — the judge compares the answers in another process, after the sandbox is
gone (``runner.py``). They make the classic shortcuts fail with a message that says what
was seen, instead of passing:

* **the answer is unavailable**: each exercise lists what *is* its answer
  (``Exercise.answers``: ``minidp.textbook.collectives.ring_all_reduce``, torch's
  ``DistributedSampler``, ...). :func:`refuse_answers` replaces each of those objects,
  wherever a module names it, by a stand-in that raises :class:`RefusedCall`.
* **an audit hook** (``sys.addaudithook``, which cannot be removed) refuses and records:
  reading or running anything in ``lessons/solutions/``; writing into the package, the
  lessons or torch; grabbing the interpreter's frames (``sys._getframe``,
  ``inspect.stack``, a traceback's ``tb_frame``, ``sys._current_frames``) or walking its
  objects (``gc.get_objects``/``get_referrers``) *from the learner's file* — a sandbox
  holds no answers there, and looking counts as tampering.
* **a seal** (``seal.py``) on the checker's and torch's names and code, taken before the
  learner's file is imported: re-pointing a function, or swapping its ``__code__``.

Every finding goes into :data:`FINDINGS`; the sandbox sends them with the case they
happened in, and the judge fails the check as tampering (exit 2).

Test: ``pytest tests/test_exercise_guards.py``
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import types
from pathlib import Path

from minidp.tools.exercise.learner_group import RefusedCall

FINDINGS: list[str] = []  # what this sandbox saw, in order (sent with each case)
_lock = threading.Lock()
_inside = threading.local()  # the hook's own frame lookups must not re-enter it
_FRAME_EVENTS = ("sys._getframe", "sys._current_frames", "gc.get_objects",
                 "gc.get_referrers", "gc.get_referents")  # fmt: skip
_SPAWN_EVENTS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_WRITE_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.truncate", "os.chmod", "os.link",
                 "os.symlink", "shutil.rmtree", "shutil.move", "shutil.copyfile")  # fmt: skip


class Tampering(BaseException):
    """Raised into the learner's code by the audit hook (a BaseException: ``except
    Exception`` does not swallow it; the finding is recorded before it is raised anyway)."""


def note(finding: str) -> None:
    with _lock:
        if finding not in FINDINGS:
            FINDINGS.append(finding)


# ----------------------------------------------------------------------------- answers


def _targets(dotted: str) -> list[tuple]:
    """``(owner, attribute, object)`` for what ``dotted`` names: every function defined in it
    if it is a module, else the one object (a function, a class, a method). [] for a name
    this torch or minidp lacks."""
    module = sys.modules.get(dotted)
    if module is None:
        try:
            module = importlib.import_module(dotted)
        except ImportError:
            module = None
    if isinstance(module, types.ModuleType):
        return [(module, k, v) for k, v in vars(module).items()
                if isinstance(v, types.FunctionType) and v.__module__ == dotted]  # fmt: skip
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
            for attr in parts[cut:-1]:
                owner = getattr(owner, attr)
            return [(owner, parts[-1], getattr(owner, parts[-1]))]
        except (ImportError, AttributeError):
            continue
    return []


def _stand_in(obj, tools: str):
    dotted = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"

    def refused(*args, **kwargs):
        raise RefusedCall(
            f"{dotted} is this exercise's answer (or part of it), so the check makes it "
            f"unavailable — expected your own code, got a call to {dotted}. Hint: {tools}"
        )

    refused.__name__ = refused.__qualname__ = getattr(obj, "__name__", "refused")
    return refused


def refuse_answers(names: tuple[str, ...], tools: str) -> None:
    """Replace each object named in ``names`` (a module: each function defined in it) by a
    refusing stand-in where it is defined and in every module that imported it — except
    the checker's own modules, which keep what they use."""
    stand_ins: dict[int, tuple] = {}
    for dotted in names:
        for owner, attr, obj in _targets(dotted):
            stand_in = stand_ins.setdefault(id(obj), (obj, _stand_in(obj, tools)))[1]
            setattr(owner, attr, stand_in)
    for name, module in list(sys.modules.items()):
        if module is None or name.startswith("minidp.tools.exercise"):
            continue
        for key, value in list(getattr(module, "__dict__", {}).items()):
            hit = stand_ins.get(id(value))
            if hit is not None and hit[0] is value:
                setattr(module, key, hit[1])


# ----------------------------------------------------------------------------- the audit hook


def _caller_file() -> str:
    """The file of the nearest Python frame outside the standard library's ``inspect``
    and ``traceback`` helpers, above this hook."""
    _inside.on = True
    try:
        frame = sys._getframe(2)  # 0: here, 1: the hook, 2: whoever raised the event
        while frame is not None and Path(frame.f_code.co_filename).name in ("inspect.py",):
            frame = frame.f_back
        return frame.f_code.co_filename if frame is not None else ""
    finally:
        _inside.on = False


def _inside_dir(path: str, folder: str) -> bool:
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return real == folder or real.startswith(folder + os.sep)


def _protected(path, protected: tuple[str, ...]) -> bool:
    """Inside the package, the lessons or torch — but not a ``__pycache__`` (an import that
    compiles a module writes its bytecode there)."""
    return "__pycache__" not in os.fsdecode(path) and any(_inside_dir(path, p) for p in protected)


def _is_learner(path, learner: str) -> bool:
    """The learner's own file, or its compiled bytecode (a check of a reference solution
    imports that solution — and only that one)."""
    real = os.path.realpath(os.fsdecode(path))
    folder, stem = os.path.split(learner)
    cached = os.path.join(folder, "__pycache__", os.path.splitext(stem)[0] + ".")
    return real == learner or real.startswith(cached)


def install(learner: str, solutions: str, protected: tuple[str, ...]) -> None:
    """The audit hook, for a learner's file at ``learner`` (see the module docstring)."""
    learner, solutions = os.path.realpath(learner), os.path.realpath(solutions)
    repo = os.path.dirname(os.path.dirname(solutions))  # findings name paths from here
    protected = tuple(os.path.realpath(p) for p in protected)

    def refuse(finding: str) -> None:
        note(finding)
        raise Tampering(finding)

    def hook(event: str, args: tuple) -> None:
        if getattr(_inside, "on", False):
            return
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path, mode = args[0], str(args[1]) if len(args) > 1 else "r"
            if _inside_dir(path, solutions) and not _is_learner(path, learner):
                shown = os.path.relpath(os.fsdecode(path), repo)
                refuse(f"read {shown}: the reference solutions are not available to code "
                       "under check")  # fmt: skip
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = any(c in mode for c in "wax+") or flags & _WRITE_FLAGS
            if writes and _protected(path, protected):
                refuse(f"opened {os.fsdecode(path)} for writing: code under check may not "
                       "change the package, the lessons or torch")  # fmt: skip
        elif event in _WRITE_EVENTS and args:
            if any(_protected(a, protected) for a in args[:2] if isinstance(a, (str, bytes))):
                refuse(f"{event} on {args[0]}: code under check may not change the package, "
                       "the lessons or torch")  # fmt: skip
        elif event in _SPAWN_EVENTS and solutions in repr(args):
            refuse(f"started a process on lessons/solutions ({event}): the reference "
                   "solutions are not available to code under check")  # fmt: skip
        elif event in _FRAME_EVENTS or (
            event == "object.__getattr__" and len(args) == 2 and args[1] == "tb_frame"
        ):
            if _caller_file() == learner:
                what = "tb_frame" if event == "object.__getattr__" else event
                refuse(f"your file called {what} — it looked into the interpreter's frames "
                       "or objects: the sandbox holds no answers there, and reading the "
                       "checker's state counts as tampering")  # fmt: skip

    sys.addaudithook(hook)


def protected_dirs() -> tuple[str, ...]:
    """The package, the lessons (stubs, solutions) and torch: nothing under check writes there."""
    import torch

    import minidp

    root = Path(minidp.__file__).resolve().parents[1]
    return (str(root / "minidp"), str(root / "lessons"), str(Path(torch.__file__).parent))
