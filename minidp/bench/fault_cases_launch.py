"""The launcher's and DataParallel's rows of ``python -m minidp bench faults``.

Run: ``python -m minidp bench faults --only launch`` (or any word of a row's name).

Bad arguments to the launchers, scripts started the wrong way (no ``__main__`` guard, a
rank function typed into ``python -c`` or stdin), Ctrl-C caught by a notebook, a parent
killed under ranks with DataLoader workers, a thread rank that never returns, a stall
under ``torchrun``, and DataParallel inputs torch would silently cut. Scripts run in a
fresh interpreter (``subprocess``), because how Python was started is the fault.

Test: ``pytest tests/test_reliability_launch.py`` (it reuses the scripts and the Ctrl-C
injector defined here).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from torch import nn

import minidp
from minidp.bench.fault_cases import Fault, like_torch
from minidp.launch import ProcessWorld, child_processes, run_threads, spawn

ROOT = Path(minidp.__file__).resolve().parents[1]  # the checkout, for PYTHONPATH

# ---- scripts: each runs in a fresh interpreter --------------------------------------------

SCRIPTS = {
    "unguarded": """\
import minidp
def main(rank, world_size):
    return rank
print(minidp.launch.spawn(main, 2))
""",
    "interactive": """\
import minidp
def main(rank, world_size):
    return rank
print(minidp.launch.spawn(main, 1))
""",
    "torchrun_stall": """\
import time
import torch
import minidp

def main(rank, world_size):
    if rank == 1:
        time.sleep(10)  # past launch()'s 3 s timeout, then it joins in
    minidp.comm.all_reduce(torch.ones(4))
    return rank

if __name__ == "__main__":
    minidp.launch.launch(main, 2, timeout=3)  # 3 s: joining the group under load fits
""",
    "orphans": """\
import json, os, subprocess, sys, time
import minidp
from torch.utils.data import DataLoader, TensorDataset
import torch

KEEP = []

def start_children(rank, world_size):
    data = TensorDataset(torch.arange(8.0))  # forked workers start at once (spawned: seconds)
    loader = DataLoader(data, num_workers=2, persistent_workers=True,
                        multiprocessing_context="fork")
    KEEP.append(iter(loader))
    next(KEEP[-1])
    # a child with no watchdog of its own (DataLoader workers poll for their parent)
    KEEP.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
    return sorted(minidp.launch.child_processes() | {os.getpid()})

if __name__ == "__main__":
    world = minidp.launch.ProcessWorld(1)
    print(json.dumps(world.run(start_children)[0]), flush=True)
    time.sleep(600)
""",
}


def subprocess_env() -> dict:
    """This environment for a fresh interpreter: finds this checkout, is no torchrun rank."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run_script(name: str, how: str, cwd: str) -> subprocess.CompletedProcess:
    """Run ``SCRIPTS[name]`` as ``python file.py``, ``python -c``, stdin or under torchrun."""
    source, path = SCRIPTS[name], Path(cwd) / f"{name}.py"
    path.write_text(source)
    cmd = {
        "file": [path.name],
        "-c": ["-c", source],
        "stdin": ["-"],
        "torchrun": ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                     "--max-restarts", "0", path.name],
    }[how]  # fmt: skip
    return subprocess.run(
        [sys.executable, *cmd],
        cwd=cwd,
        env=subprocess_env(),
        input=source if how == "stdin" else None,
        capture_output=True,
        text=True,
        timeout=180,
    )


class ScriptFailed(RuntimeError):
    """A script exited with an error; the message ends with the exception line it printed.

    ``raised``: that exception's class name, what the table shows as the root cause.
    """

    def __init__(self, message: str, exception_line: str) -> None:
        super().__init__(f"{message}: {exception_line}")
        name = exception_line.split(":", 1)[0].rsplit(".", 1)[-1]
        self.raised = f"script: {name}" if EXCEPTION_LINE.match(exception_line) else "script"


def _script(name: str, how: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = run_script(name, how, tmp)
    if out.returncode != 0:
        lines = (out.stdout + out.stderr).splitlines()
        raised = [m.group(1) for m in map(EXCEPTION_LINE.match, lines) if m]
        last = (raised or lines or [""])[-1]  # the last exception (chained ones come last)
        raise ScriptFailed(f"exit {out.returncode}, {len(out.stderr.splitlines())} lines", last)


# "pkg.SomeError: text", also as torchrun prefixes it ("[rank0]: ..."); not empty ones
EXCEPTION_LINE = re.compile(r"^(?:\[rank\d+\]: )?([\w.]*(?:Error|Timeout|Exception): \S.*)")


def is_alive(pid: int) -> bool:
    """A live (non-zombie) process, from ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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
        pids = json.loads(parent.stdout.readline())
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
          _script, ("unguarded", "file"),
          r"exit 1, \d lines: RuntimeError: spawn: called at the top level .* \(line 4\)"),
    Fault("bad input", "launch: rank function typed into python -c", "local", 0, _script,
          ("interactive", "-c"), r"RuntimeError: spawn: 'main' is defined in __main__ of an "
          r"interactive session"),
    Fault("bad input", "launch: rank function read from stdin", "local", 0, _script,
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
          _script, ("torchrun_stall", "torchrun"),
          r"minidp.comm.errors.CollectiveTimeout: .*rank 0 timed out waiting to recv from rank 1",
          stall=True),
    Fault("bad input", "DataParallel: inputs of 6 and 2 rows on 3 devices", "local", 0, _dp,
          ("rows",), r"ValueError: DataParallel: input tensors split into different numbers"),
    Fault("bad input", "DataParallel: gather 0-dim outputs along dim -1", "local", 0, _dp,
          ("gather_0dim",), r"ValueError: DataParallel: cannot gather outputs of shapes "
          r"\[\(\), \(\)\] along dim=-1"),
]  # fmt: skip
