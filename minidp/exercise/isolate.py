"""Run a check in a child process, so that gloo aborting cannot take the command down.

gloo ends the whole process (``std::terminate``: "Received data size doesn't match
expected size") when a rank receives a message *larger* than the buffer it posted. A
learner's ring hits this easily: with ``numel % world != 0`` the chunks differ in length,
and sending chunk i while the neighbour receives chunk j is enough. No Python code can
catch that, so ``python -m minidp exercise check`` runs the checker in a child process
(``--in-process``), streams its output, and when the child is aborted explains what
happened after the case line it was running.

Test: ``pytest tests/test_exercises.py -k abort``
"""

from __future__ import annotations

import re
import subprocess
import sys

# (bytes received, bytes of room): gloo's wording in torch >= 2.7, then in older torch
SIZES = (
    re.compile(r"(\d+) vs (\d+)\. Received data size"),
    re.compile(r"preamble\.length <= op\.nbytes\. (\d+) vs (\d+)"),
)
SIZE_HINT = (
    "hint (message sizes differ): the sender and the receiver of each message must agree "
    "on its size. With numel % world != 0 the chunks differ in length: at every step send "
    "and receive the *same* chunk index, into a buffer of that chunk's size."
)


def explain(returncode: int, stderr: str) -> str:
    """Why the child died, for the learner; "" if it exited normally."""
    if returncode >= 0 and returncode != 134:  # 134: abort() seen through a shell
        return ""
    sizes = next((m for m in (pattern.search(stderr) for pattern in SIZES) if m), None)
    if sizes:
        got, room = sizes.groups()
        return (
            "ABORTED: gloo stopped the check process during the case above: a rank received "
            f"a message of {got} bytes into a receive buffer of {room} bytes.\n{SIZE_HINT}"
        )
    tail = "\n".join(stderr.strip().splitlines()[-5:])
    return f"ABORTED: the check process died (code {returncode}) during the case above:\n{tail}"


def run(argv: list[str], capture: bool = False) -> tuple[int, str, str]:
    """``python -m minidp exercise ARGV --in-process``; returns (exit code, stdout, why).

    stdout streams to ours unless ``capture``; stderr is kept to explain an abort (and
    passed on when there is nothing to explain).
    """
    cmd = [sys.executable, "-m", "minidp", "exercise", *argv, "--in-process"]
    proc = subprocess.run(
        cmd, stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE, text=True
    )
    why = explain(proc.returncode, proc.stderr)
    if not why and proc.stderr:
        sys.stderr.write(proc.stderr)
    return (1 if why else proc.returncode), proc.stdout or "", why
