"""Benchmark: inject faults and bad inputs, time how long until a clear error, check leaks.

Run: ``python -m minidp bench faults`` (about 3 minutes on 2 cores; ``--only WORD`` runs
the matching rows, ``--no-cost`` skips the checked-mode measurement, ``--help``).

Every row starts a FRESH world (real processes, or a thread world of real gloo groups;
"local" rows need none), injects one fault or one bad input, and records:

* **seconds** from the call into the world (start-up excluded) to the exception;
* the **root cause** the launcher named (``WorkerError.rank``, its exception or signal)
  and the first line of its message; what the other ranks did;
* **hung?** every row has a backstop deadline; a row that reaches it says so;
* **leftovers**: child processes of this process, and rank threads, still alive after the
  row (should be none);
* a **verdict**: "clear" when the error is the one a learner can act on (the expected
  type and wording), otherwise what went wrong (an unclear error, a silently wrong result).

Stall rows use a 2 s collective timeout, so their time is the timeout by design; deaths
and mismatches should take milliseconds (plus the launcher's 1 s grace when a survivor is
still blocked).

Then the cost of checked mode (``minidp.comm.checked()``, ``MINIDP_DEBUG=DETAIL``): median
time of one ring all-reduce with and without it, 2 rank processes, several sizes; the
two take turns repetition by repetition, each repetition counts the slowest rank.

Not a test: ``pytest tests/test_faults.py`` checks the same behaviours.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import re
import sys
import threading
import time
from typing import Any

import torch

from minidp.launch import ProcessWorld, WorkerError, child_processes, run_threads
from minidp.launch.errors import Failure
from minidp.tools.bench.args import positive_float, positive_int
from minidp.tools.bench.checked_cost import checked_cost, cost_table
from minidp.tools.bench.fault_cases import BACKSTOP_S, FAULTS, TIMEOUT_S, Fault
from minidp.tools.bench.fault_cases import (  # re-exported: tests reuse the SIGKILL injector
    killed_mid_all_reduce as killed_mid_all_reduce,
)
from minidp.tools.bench.fault_cases_comm import COMM_FAULTS
from minidp.tools.bench.fault_cases_launch import LAUNCH_FAULTS

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


# ---- main ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="minidp bench faults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--only", default="", help="run only rows whose name contains this text")
    p.add_argument("--no-cost", action="store_true", help="skip the checked-mode measurement")
    p.add_argument(
        "--sizes",
        type=positive_int,
        nargs="+",
        default=[4, 4096, 256 << 10, 16 << 20],
        help="all-reduce sizes in bytes for the checked-mode cost (4 B, 4 KiB, 256 KiB, 16 MiB)",
    )
    p.add_argument("--budget", type=positive_float, default=2.0, help="seconds per size (2)")
    args = p.parse_args(argv)
    rows = FAULTS + LAUNCH_FAULTS + COMM_FAULTS
    faults = [f for f in rows if args.only.lower() in f.name.lower()]
    print(
        f"faults benchmark on {platform.machine()} with {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}, gloo over loopback; {len(faults)} rows, each in a fresh world",
        flush=True,
    )
    outcomes = []
    for i, fault in enumerate(faults, 1):
        print(f"[{i}/{len(faults)}] {fault.name} ...", end=" ", file=sys.stderr, flush=True)
        outcome = run_fault(fault)
        outcomes.append(outcome)
        print(f"{outcome.seconds:.2f} s, {outcome.verdict}", file=sys.stderr, flush=True)
    print()
    print(table(outcomes))
    hung = [o for o in outcomes if o.hung]
    leaked = sum(o.leftovers for o in outcomes)
    errors = [o for o in outcomes if o.raised != "none"]
    # "clear" (or "clear: ..." for a row whose right outcome is no exception), or no error
    # at all where that is the right answer to a valid input
    unclear = [
        o.fault.name
        for o in outcomes
        if not (o.verdict == "clear" or o.verdict.startswith("clear:"))
        and o.verdict != "no error (like torch)"
    ]
    print(
        f"\n{len(errors)}/{len(outcomes)} rows ended in an error, the slowest after "
        f"{max((o.seconds for o in errors), default=0):.2f} s; hung: {len(hung)}; "
        f"processes or rank threads left behind: {leaked}."
    )
    if unclear:
        print(f"not clear (see the verdict column): {'; '.join(unclear)}")
    if not args.no_cost:
        print("\nstarting 2 rank processes for checked mode's cost ...", file=sys.stderr)
        with ProcessWorld(2, timeout=300) as w:
            cost = w.run(checked_cost, args.sizes, args.budget, 400)[0]
        print("\nchecked mode (minidp.comm.checked()) vs plain, ring all-reduce, 2 ranks:\n")
        print(cost_table(cost))
    return 0


if __name__ == "__main__":
    sys.exit(main())
