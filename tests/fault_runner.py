"""Run one fault in a fresh world: time it to the error, judge the error, count leftovers.

Used by the catalog of faults and bad inputs (``fault_catalog.py``: ``python
tests/fault_catalog.py``, ``pytest -m slow tests/test_fault_catalog.py``). A
:class:`Fault` names its world ("processes", "threads" or "local"), a rank function that
misbehaves on purpose, and the regex the first line of a CLEAR error must match;
:func:`run_fault` starts the world, times the error and returns an :class:`Outcome`.

Test: ``pytest tests/test_faults.py -k bench``
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from minidp.launch import ProcessWorld, WorkerError, child_processes, run_threads
from minidp.launch.errors import Failure

STALL_S = 2.0  # the collective timeout of the stall rows
TIMEOUT_S = 10.0  # every other group's timeout (thread worlds: also their run deadline)
BACKSTOP_S = 15.0  # a process row still running after this is reported as hung


@dataclasses.dataclass
class Fault:
    category: str
    name: str
    world: str  # "processes", "threads" or "local"
    size: int
    fn: Callable
    args: tuple = ()
    expect: str = ""  # regex the first line of a clear error matches
    env: dict = dataclasses.field(default_factory=dict)  # for the rank processes
    run_timeout: float | None = BACKSTOP_S
    on_success: Callable[[list], str] | None = None  # verdict when nothing was raised
    stall: bool = False  # the row's time is a timeout by design


# ---- running one row ----------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    fault: Fault
    seconds: float
    raised: str  # "ValueError", "signal SIGKILL", "none"
    first_line: str
    others: str
    hung: bool
    leftovers: int
    verdict: str


def _rank_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("minidp-world")}


@contextlib.contextmanager
def _environ(extra: dict) -> Any:
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _what(f: Failure) -> str:
    """What one rank did, in a few words."""
    return f.exc_type or ("still running" if f.stuck else f"exit {f.exitcode}")


def _summarise(exc: BaseException) -> tuple[str, str, str]:
    """(what the root cause raised, the error's first line, what the others did)."""
    if not isinstance(exc, WorkerError):  # a script row names what the script raised
        raised = getattr(exc, "raised", type(exc).__name__)
        return raised, f"{type(exc).__name__}: {str(exc).splitlines()[0]}", ""
    first = str(exc).splitlines()[0]
    raised = exc.exc_type or first.split(" was killed by ")[-1].split(" (")[0]
    if exc.exitcode is not None and exc.exitcode >= 0:
        raised = f"exit code {exc.exitcode}"
    if exc.failures[0].stuck:
        raised = "still running"
    raised = f"rank {exc.rank}: {raised}"
    others = [f"{f.rank}: {_what(f)}" for f in exc.failures[1:]]
    # the launcher's note on ranks it stopped (process world) or that outlived the thread
    # world's deadline; when nobody raised, those ranks are the failures listed above
    stopped = re.search(r"still running[^:\n]*: \[([\d, ]*)\]", str(exc))
    if stopped and stopped.group(1) and not exc.failures[0].stuck:
        others.append(f"stopped: [{stopped.group(1)}]")
    return raised, first, "; ".join(others)


def run_fault(fault: Fault) -> Outcome:
    before_procs, before_threads = child_processes(), _rank_threads()
    results, error = None, None
    world = None
    if fault.world == "processes":
        with _environ(fault.env):
            world = ProcessWorld(fault.size, timeout=TIMEOUT_S)
    t0 = time.perf_counter()
    try:
        if world is not None:
            results = world.run(fault.fn, *fault.args, timeout=fault.run_timeout)
        elif fault.world == "threads":
            results = run_threads(fault.fn, fault.size, *fault.args, timeout=TIMEOUT_S)
        else:
            results = [fault.fn(*fault.args)]
    except Exception as exc:  # the row's outcome, whatever it is
        error = exc
    seconds = time.perf_counter() - t0
    if world is not None:
        world.close(kill=True)
    time.sleep(0.05)  # let killed children be reaped before counting
    leftovers = len(child_processes() - before_procs) + len(_rank_threads() - before_threads)
    if error is None:
        verdict = fault.on_success(results) if fault.on_success else "no error"
        return Outcome(fault, seconds, "none", "", "", False, leftovers, verdict)
    raised, first, others = _summarise(error)
    # the backstop's words (ProcessWorld.run's deadline, or the thread world's)
    backstops = {BACKSTOP_S, TIMEOUT_S} | {t for t in [fault.run_timeout] if t and t > BACKSTOP_S}
    hung = any(f"at the {s:g}s deadline" in str(error) for s in backstops)
    clear = re.search(fault.expect, first) is not None
    verdict = "clear" if clear else "UNCLEAR"
    if hung:
        verdict = "HUNG (stopped by the backstop)"
    elif not fault.stall and fault.world != "local" and seconds >= 0.9 * TIMEOUT_S:
        verdict += f"; a rank waited for the {TIMEOUT_S:g} s timeout"
    return Outcome(fault, seconds, raised, first, others, hung, leftovers, verdict)


def _cell(text: str, width: int) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| # | kind | fault or bad input | world | root cause | first line of the error | "
        "other ranks | s to error | hung? | leftovers | verdict |",
        "|---:|---|---|---|---|---|---|---:|---|---:|---|",
    ]
    for i, o in enumerate(outcomes, 1):
        f = o.fault
        world = "local" if f.world == "local" else f"{f.size} {f.world}"
        lines.append(
            f"| {i} | {f.category} | {_cell(f.name, 60)} | {world} | {_cell(o.raised, 24)} | "
            f"{_cell(o.first_line, 110)} | {_cell(o.others, 50)} | {o.seconds:.2f} | "
            f"{'YES' if o.hung else 'no'} | {o.leftovers} | {o.verdict} |"
        )
    return "\n".join(lines)
