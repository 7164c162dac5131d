"""The scripts of the launcher's fault rows, and how they are run: each in a fresh interpreter.

Run: ``pytest -m slow tests/test_fault_catalog.py -k launch`` (the rows in
``fault_cases_launch.py``).

How Python was started is the fault being tested (no ``__main__`` guard, a rank function
typed into ``python -c`` or stdin, a stall under ``torchrun``, a parent killed under
ranks with DataLoader workers), so each script is written to a file and run with
``subprocess``; :class:`ScriptFailed` carries the exception line it printed.

Test: ``pytest tests/test_reliability_launch.py`` (it runs the same scripts).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import minidp

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


def script(name: str, how: str) -> None:
    """Run ``SCRIPTS[name]`` the ``how`` way; raise :class:`ScriptFailed` if it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        out = run_script(name, how, tmp)
    if out.returncode != 0:
        lines = (out.stdout + out.stderr).splitlines()
        raised = [m.group(1) for m in map(EXCEPTION_LINE.match, lines) if m]
        last = (raised or lines or [""])[-1]  # the last exception (chained ones come last)
        raise ScriptFailed(f"exit {out.returncode}, {len(out.stderr.splitlines())} lines", last)


# "pkg.SomeError: text", also as torchrun prefixes it ("[rank0]: ..."); not empty ones
EXCEPTION_LINE = re.compile(r"^(?:\[rank\d+\]: )?([\w.]*(?:Error|Timeout|Exception): \S.*)")
