"""What the sandbox refuses and watches: what *is* the answer (``Exercise.answers``) becomes a
stand-in raising ``RefusedCall`` (a wrong answer); an audit hook refuses reading the
solutions, writing into the package, lessons or torch, and looking into frames; a seal sees
minidp's or torch's names re-pointed. Both are tampering (exit 2), noted in FINDINGS."""

import builtins
import importlib
import os
import sys
import threading
import types
from pathlib import Path

import torch
import torch.distributed as dist

from minidp.tools.exercise.learner_group import RefusedCall

FINDINGS: list[str] = []  # what this sandbox saw, in order
_busy = threading.local()  # the hook's own frame lookup must not re-enter it
_FRAMES = ("sys._getframe", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
           "gc.get_referents")  # fmt: skip
_SPAWNS = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn")
_WRITES = ("os.remove", "os.rename", "os.rmdir", "os.truncate", "os.chmod", "os.link",
           "os.symlink", "shutil.rmtree", "shutil.move", "shutil.copyfile")  # fmt: skip
# where each path argument's dir_fd is: a relative name is relative to that folder, not to
# the working directory (shutil.rmtree unlinks its entries that way)
_DIR_FD = {"os.remove": (1,), "os.rmdir": (1,), "os.rename": (2, 3), "os.chmod": (2,),
           "os.link": (2, 3), "os.symlink": (0, 2), "shutil.rmtree": (1,)}  # fmt: skip


def _paths(event: str, args: tuple) -> list[str]:
    """The paths an event writes, each against its dir_fd where it has one."""
    fds = [args[i] if i else None for i in _DIR_FD.get(event, ())] + [None, None]
    return [os.path.join(_folder(fd), os.fsdecode(p)) if isinstance(fd, int) else p
            for p, fd in zip(args[:2], fds) if isinstance(p, (str, bytes))]  # fmt: skip


def _folder(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: judged against the working directory
        return ""


class Tampering(BaseException):
    """Raised by the audit hook (``except Exception`` does not catch it; noted first)."""


def note(finding: str) -> None:
    if finding not in FINDINGS:
        FINDINGS.append(finding)


def targets(dotted: str) -> list[tuple]:
    """``(owner, attribute, object)``: a module's own functions, else the one object, or []."""
    try:
        module = importlib.import_module(dotted)
        return [(module, k, v) for k, v in vars(module).items()
                if isinstance(v, types.FunctionType) and v.__module__ == dotted]  # fmt: skip
    except ImportError:
        pass
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


def refuse_answers(names: tuple[str, ...]) -> None:
    """Each object named: a refusing stand-in wherever it is (but in the checker's modules)."""
    stand_ins: dict[int, tuple] = {}
    for dotted in names:
        for owner, attr, obj in targets(dotted):
            stand_ins.setdefault(id(obj), (obj, _stand_in(obj)))
            setattr(owner, attr, stand_ins[id(obj)][1])
    for name, module in list(sys.modules.items()):
        if module is not None and not name.startswith("minidp.tools.exercise"):
            for key, value in list(getattr(module, "__dict__", {}).items()):
                if id(value) in stand_ins and stand_ins[id(value)][0] is value:
                    setattr(module, key, stand_ins[id(value)][1])


def _stand_in(obj):
    dotted = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"

    def refused(*args, **kwargs):
        raise RefusedCall(
            f"{dotted} is this exercise's answer (or part of it), so the check makes it "
            f"unavailable — expected your own code, got a call to {dotted}. Hint: the stub's "
            "docstring lists the tools")  # fmt: skip

    refused.__name__ = refused.__qualname__ = getattr(obj, "__name__", "refused")
    return refused


def _inside(path, folder: str) -> bool:
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return real == folder or real.startswith(folder + os.sep)


def install(learners: list[str], solutions: str) -> None:
    """The audit hook for the files under check (see the module docstring)."""
    import minidp

    learners, solutions = [os.path.realpath(p) for p in learners], os.path.realpath(solutions)
    root = Path(minidp.__file__).resolve().parents[1]
    protected = [str(root / "minidp"), str(root / "lessons"), str(Path(torch.__file__).parent)]
    cached = tuple(str(Path(p).parent / "__pycache__" / Path(p).stem) + "." for p in learners)

    def refuse(finding: str) -> None:
        note(finding)
        raise Tampering(finding)

    def writes_inside(path) -> bool:  # (an import compiling a module writes __pycache__)
        return "__pycache__" not in os.fsdecode(path) and any(_inside(path, p) for p in protected)

    def caller() -> str:
        _busy.on = True
        try:
            frame = sys._getframe(2)  # 0: here, 1: the hook, 2: whoever raised the event
            while frame is not None and Path(frame.f_code.co_filename).name == "inspect.py":
                frame = frame.f_back
            return os.path.realpath(frame.f_code.co_filename) if frame is not None else ""
        finally:
            _busy.on = False

    def hook(event: str, args: tuple) -> None:
        if getattr(_busy, "on", False):
            return
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            real = os.path.realpath(os.fsdecode(args[0]))
            if _inside(real, solutions) and real not in learners and not real.startswith(cached):
                refuse(f"read {os.path.relpath(real, root)}: the reference solutions are not "
                       "available to code under check")  # fmt: skip
            mode, flags = str(args[1]) if len(args) > 1 else "r", args[2] if len(args) > 2 else 0
            writing = any(c in mode for c in "wax+") or (isinstance(flags, int) and flags & (
                os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC))  # fmt: skip
            if writing and writes_inside(args[0]):
                refuse(f"opened {os.fsdecode(args[0])} for writing: code under check may not "
                       "change the package, the lessons or torch")  # fmt: skip
        elif event in _WRITES and any(writes_inside(a) for a in _paths(event, args)):
            refuse(f"{event} on {args[0]}: code under check may not change the package, the "
                   "lessons or torch")  # fmt: skip
        elif event in _SPAWNS and solutions in repr(args):
            refuse(f"started a process on lessons/solutions ({event}): the reference solutions "
                   "are not available to code under check")  # fmt: skip
        elif event in _FRAMES or (event == "object.__getattr__" and args[1:] == ("tb_frame",)):
            if caller() in learners:
                what = "tb_frame" if event == "object.__getattr__" else event
                refuse(f"your file called {what} — it looked into the interpreter's frames or "
                       "objects: the sandbox holds no answers there, and reading the checker's "
                       "state counts as tampering")  # fmt: skip

    sys.addaudithook(hook)


_SEALED = (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType,
           types.WrapperDescriptorType, types.ModuleType, type, staticmethod, classmethod,
           property)  # fmt: skip


class Seal:
    """What each name of minidp's modules and classes and torch's core was, and its code."""

    def __init__(self) -> None:
        spaces = [(n, m) for n, m in list(sys.modules.items()) if n.split(".")[0] == "minidp" and m]
        spaces += [(f"{n}.{k}", v) for n, m in spaces for k, v in list(vars(m).items())
                   if isinstance(v, type) and v.__module__ == n]  # fmt: skip
        spaces += [("torch", torch), ("torch.Tensor", torch.Tensor), ("builtins", builtins),
                   ("torch.distributed", dist), ("torch.testing", torch.testing)]  # fmt: skip
        # the objects themselves are held: an identity test cannot meet a reused id
        self.spaces = [(label, owner, {k: v for k, v in list(vars(owner).items())
                                       if issubclass(type(v), _SEALED)})
                       for label, owner in spaces]  # fmt: skip
        self.code = {id(v): v.__code__ for *_, sealed in self.spaces for v in sealed.values()
                     if isinstance(v, types.FunctionType)}  # fmt: skip

    def broken(self, when: str) -> str | None:
        """The finding, if a sealed name was re-pointed (or its code swapped) since."""
        changed = []
        for label, owner, sealed in self.spaces:
            for name, original in list(sealed.items()):
                value, code = vars(owner).get(name), self.code.get(id(original))
                if value is original:
                    if code is not None and value.__code__ is not code:
                        changed.append(f"{label}.{name}.__code__")
                elif getattr(value, "__wrapped__", None) is original and label.startswith("torch"):
                    sealed[name] = value  # torch wraps a few of its own once (torch._dynamo)
                else:
                    changed.append(f"{label}.{name}")
        if not changed:
            return None
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        return (f"your file changed the checker's or torch's own code {when}: "
                f"{', '.join(changed[:5])}{more}. The verdict is computed in another process, "
                "which such a change cannot reach — and changing the checker counts as "
                "tampering.")  # fmt: skip
