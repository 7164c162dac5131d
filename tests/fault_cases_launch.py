"""The launcher's and DataParallel's rows of the fault catalog.

Run: ``pytest -m slow tests/test_fault_catalog.py -k launch`` (or any word of a row's name).

Bad arguments to the launchers, scripts started the wrong way (no ``__main__`` guard, a
rank function typed into ``python -c`` or stdin), Ctrl-C caught by a notebook, a parent
killed under ranks with DataLoader workers, a thread rank that never returns, a stall
under ``torchrun``, and DataParallel inputs torch would silently cut. The scripts, and
running them in a fresh interpreter, live in ``fault_scripts.py``;
``tests/test_reliability_launch.py`` reuses them and the Ctrl-C injector defined here.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from fault_cases import like_torch
from fault_runner import Fault
from fault_scripts import SCRIPTS, script, subprocess_env
from torch import nn

import minidp
from minidp.launch import ProcessWorld, child_processes, run_threads, spawn
from minidp.launch.leftovers import is_running as is_alive


def orphans_after_parent_killed(cwd: str, give_up_s: float = 60.0) -> tuple[list, list]:
    """SIGKILL a parent whose rank has DataLoader workers and a child; wait (bounded) for
    them to go. Returns (every pid below the parent, those still alive)."""
    Path(cwd, "orphans.py").write_text(SCRIPTS["orphans"])
    parent = subprocess.Popen(
        [sys.executable, "orphans.py"],
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the dead parent's resource tracker reports semaphores
        text=True,
    )
    try:
        line = parent.stdout.readline()
        while line.startswith("[Gloo]"):  # some torch versions (2.8) print these on stdout
            line = parent.stdout.readline()
        pids = json.loads(line)
    finally:
        parent.kill()
        parent.wait()
    give_up = time.monotonic() + give_up_s  # a bound on waiting, not a speed claim
    while any(map(is_alive, pids)) and time.monotonic() < give_up:
        time.sleep(0.2)
    return pids, [p for p in pids if is_alive(p)]


def _orphans() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        pids, alive = orphans_after_parent_killed(tmp)
    if alive:
        raise RuntimeError(f"{len(alive)} of {len(pids)} processes outlived their killed parent")
    return len(pids)


# ---- Ctrl-C caught by the caller (a notebook, a REPL) -------------------------------------


def _sleep_long(rank, world):
    time.sleep(60)


def ctrl_c_during(during: str) -> BaseException | None:
    """Send this process a real SIGINT while ranks start ("start-up", 2 ranks) or run ("run",
    1 rank), and catch it as a notebook does. Returns the exception caught (or None).

    The caller holds the exception, and with it the traceback and the world: a notebook
    keeps the last one too, so the world is not garbage-collected and only the
    launcher's own clean-up can have ended its ranks. A SIGINT arriving after the call
    returned is ignored, not raised elsewhere.
    """
    before = child_processes()
    inside, running = threading.Event(), threading.Event()

    def on_sigint(signum, frame):
        if inside.is_set():
            raise KeyboardInterrupt

    def press_ctrl_c():
        if during == "start-up":
            while len(child_processes() - before) < 2:  # both ranks exist, still importing
                time.sleep(0.01)
        else:
            running.wait()
            time.sleep(0.3)  # the run has been sent to the rank
        os.kill(os.getpid(), signal.SIGINT)

    old = signal.signal(signal.SIGINT, on_sigint)
    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    try:
        inside.set()
        presser.start()
        if during == "start-up":
            ProcessWorld(2).close()
        else:  # no with-block: as typed in a notebook cell, run() must clean up itself
            world = ProcessWorld(1)
            running.set()
            world.run(_sleep_long)
            world.close()
    except KeyboardInterrupt as exc:
        return exc
    finally:
        inside.clear()
        running.set()
        presser.join()
        signal.signal(signal.SIGINT, old)
    return None


# ---- rank functions -------------------------------------------------------------------


def _rank(rank, world):
    return rank


def _bad_argument(launcher: str, what: str, value) -> None:
    size, timeout = (value, 60.0) if what == "world_size" else (2, value)
    (run_threads if launcher == "run_threads" else spawn)(_rank, size, timeout=timeout)


def _spins_in_python(rank, world):
    while rank == 1:
        pass
    return rank


def _thread_world_spins() -> None:
    run_threads(_spins_in_python, 2, timeout=2.0)


def _raise_in_turn(rank, world):
    if rank == 1:
        raise ValueError("rank 1 fails first")
    time.sleep(0.3)
    raise KeyError("rank 0 fails second")


def _dataloader_workers(rank, world):
    from torch.utils.data import DataLoader, TensorDataset

    return sum(len(b) for (b,) in DataLoader(TensorDataset(torch.arange(8.0)), num_workers=2))


def _dp(case: str) -> None:
    if case == "rows":
        dp = minidp.DataParallel(nn.Bilinear(2, 2, 1), device_ids=["cpu"] * 3)
        dp(torch.ones(6, 2), torch.ones(2, 2))
    elif case == "gather_0dim":
        minidp.dp.gather([torch.tensor(1.0), torch.tensor(2.0)], "cpu", dim=-1)


def _caught(results: list) -> str:
    caught = isinstance(results[0], KeyboardInterrupt)
    return "clear: KeyboardInterrupt caught, no rank left" if caught else "NOT RAISED"


def _nothing_left(results: list) -> str:
    return f"clear: all {results[0]} processes gone"


# ---- the rows -------------------------------------------------------------------------

# (argument, value as shown, value, the error's type, the end of its first line)
_BAD = [("world_size", "'2'", "2", "TypeError", r"got '2' \(str\) — pass e.g. world_size=2"),
        ("world_size", "2.0", 2.0, "TypeError", r"got 2.0 \(float\) — pass e.g. world_size=2"),
        ("world_size", "None", None, "TypeError", r"got None \(NoneType\)"),
        ("timeout", "0", 0, "ValueError", r"> 0, got 0 — "),
        ("timeout", "-1", -1, "ValueError", r"> 0, got -1 — "),
        ("timeout", "None", None, "TypeError", r"got None \(NoneType\) — pass e.g. timeout=60"),
        ("timeout", "'10'", "10", "TypeError", r"got '10' \(str\) — pass e.g. timeout=60"),
        ("timeout", "inf", math.inf, "ValueError", r"> 0, got inf — ")]  # fmt: skip
LAUNCH_FAULTS = [
    *[Fault("bad input", f"launch: {launcher}({what}={shown})", "local", 0, _bad_argument,
            (launcher, what, value), rf"^{exc}: {launcher}: {what} must be .*{tail}")
      for launcher in ("run_threads", "spawn") for what, shown, value, exc, tail in _BAD],
    Fault("bad input", "launch: script without if __name__ == '__main__'", "local", 0,
          script, ("unguarded", "file"),
          r"exit 1, \d lines: RuntimeError: spawn: called at the top level .* \(line 4\)"),
    Fault("bad input", "launch: rank function typed into python -c", "local", 0, script,
          ("interactive", "-c"), r"RuntimeError: spawn: 'main' is defined in __main__ of an "
          r"interactive session"),
    Fault("bad input", "launch: rank function read from stdin", "local", 0, script,
          ("interactive", "stdin"), r"RuntimeError: spawn: 'main' is defined in __main__"),
    Fault("fault", "launch: Ctrl-C during start-up, caught", "local", 0, ctrl_c_during,
          ("start-up",), r"^$", on_success=_caught),
    Fault("fault", "launch: Ctrl-C during a run, caught", "local", 0, ctrl_c_during, ("run",),
          r"^$", on_success=_caught),
    Fault("fault", "launch: parent SIGKILLed, rank has DataLoader workers", "local", 0,
          _orphans, (), r"^$", on_success=_nothing_left),
    Fault("fault", "launch: DataLoader(num_workers=2) inside ranks", "processes", 2,
          _dataloader_workers, (), r"^$", on_success=like_torch,
          run_timeout=120.0),  # workers start like the ranks ("spawn"): each imports torch
    Fault("fault", "launch: thread rank spins in Python, run_threads(timeout=2)", "local", 0,
          _thread_world_spins, (), r"rank 1 was still running at the 2s deadline", stall=True),
    Fault("fault", "launch: two ranks raise, 0.3 s apart", "threads", 2, _raise_in_turn, (),
          r"rank 1 raised ValueError: rank 1 fails first"),
    Fault("fault", "launch: rank stalls under torchrun, launch(timeout=3)", "local", 0,
          script, ("torchrun_stall", "torchrun"),
          r"minidp.comm.errors.CollectiveTimeout: .*rank 0 timed out waiting to recv from rank 1",
          stall=True),
    Fault("bad input", "DataParallel: inputs of 6 and 2 rows on 3 devices", "local", 0, _dp,
          ("rows",), r"ValueError: DataParallel: input tensors split into different numbers"),
    Fault("bad input", "DataParallel: gather 0-dim outputs along dim -1", "local", 0, _dp,
          ("gather_0dim",), r"ValueError: DataParallel: cannot gather outputs of shapes "
          r"\[\(\), \(\)\] along dim=-1"),
]  # fmt: skip
