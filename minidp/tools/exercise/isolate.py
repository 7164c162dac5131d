"""The judge's side of the sandbox: start it, read its answers, then end it and all it started.

:func:`run_sandbox` has the zygote fork a sandbox (``sandbox.py``) for a list of cases,
reads its frames from a pipe — each case's answers, as data (``wire.py``) — and then
kills every process below the zygote: the sandbox, its rank processes, and whatever the
learner's code started and left running (a ``sleep 300`` in a child, double-forked or
not), which is named as tampering. Nothing is waited for on a pipe the learner's
processes might hold: frames are read by length, with a watchdog per case.

What cannot be an answer, and what it becomes:

* the sandbox ends before its last frame — ``os._exit(0)``, a crash, or gloo aborting the
  process (a rank received a longer message than its buffer): no verdict for the cases
  left, explained from its stderr (:func:`explain`);
* a frame that does not parse, comes out of order or is too big: tampering;
* no frame for ``deadline + WATCHDOG_S`` seconds: the case is stuck.

Exit codes of ``check`` (``__init__.py``): 0 every case passed; 1 a case failed (wrong,
raised, deadlock, not implemented yet); 2 tampering or no verdict (a file that cannot be
imported, a sandbox that ended early).

Test: ``pytest tests/test_exercise_guards.py``
"""

from __future__ import annotations

import os
import re
import signal
import tempfile
import time
from dataclasses import dataclass, field

from minidp.tools.exercise import wire
from minidp.tools.exercise.zygote import Zygote, ZygoteError

PASS, FAIL, ERROR = 0, 1, 2  # the command's exit codes
WATCHDOG_S = 15.0  # past the case deadline: the sandbox itself has stopped answering
START_S = 60.0  # the sandbox's first frame (it imports nothing new: the zygote did)

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
DTYPE_HINT = (
    "hint (receive buffer of another dtype?): the message is exactly {ratio}x the buffer — "
    "the same number of elements of a wider dtype? A receive buffer must have the dtype of "
    "what is sent: torch.empty_like(chunk), not torch.empty(n) (float32)."
)


@dataclass
class SandboxRun:
    """What one sandbox answered, and how it ended."""

    frames: dict[int, dict] = field(default_factory=dict)  # case index -> its "case" frame
    load_error: str = ""
    tamper: list[str] = field(default_factory=list)  # findings, in order, deduplicated
    died: str = ""  # why it ended before its last frame ("" if it did not)
    died_in: int | None = None  # the case it was running then
    ended: str = ""  # "" (its last frame came), "eof", "stuck" or "malformed"
    output: str = ""  # what the learner's code printed (stdout and stderr)

    def add_tamper(self, findings) -> None:
        for f in findings if isinstance(findings, list) else [findings]:
            if isinstance(f, str) and f not in self.tamper:
                self.tamper.append(wire.decode(f))


def explain(returncode: int | None, stderr: str) -> str:
    """Why the sandbox died, for the learner; "" if it exited normally."""
    if returncode is not None and returncode >= 0 and returncode != 134:
        return ""
    sizes = next((m for m in (pattern.search(stderr) for pattern in SIZES) if m), None)
    if sizes:
        got, room = (int(v) for v in sizes.groups())
        ratio = got // room if room and got % room == 0 else 0
        hint = DTYPE_HINT.format(ratio=ratio) if ratio in (2, 4, 8) else SIZE_HINT
        return (
            "ABORTED: gloo stopped the sandbox during this case: a rank received "
            f"a message of {got} bytes into a receive buffer of {room} bytes.\n{hint}"
        )
    tail = "\n".join(stderr.strip().splitlines()[-5:])
    return f"ABORTED: the sandbox died (code {returncode}) during this case:\n{tail}"


def _read(run: SandboxRun, fd: int, n_cases: int, deadline: float) -> str:
    """Read frames until ``done``; returns "" or what ended the reading ("eof", "stuck")."""
    expect, current = "hello", None
    while True:
        timeout = START_S if expect == "hello" else deadline + WATCHDOG_S
        try:
            raw = wire.read_frame(fd, timeout)
        except TimeoutError:
            run.died_in = current
            return "stuck"
        except wire.Malformed as exc:
            run.add_tamper(f"the sandbox sent a malformed answer ({exc}): something wrote "
                           "into the checker's pipe")  # fmt: skip
            return "malformed"
        if raw is None:
            run.died_in = current
            return "eof"
        kind = raw.get("kind") if isinstance(raw, dict) else None
        if kind == "load_error" and expect == "hello-or-load":
            run.load_error = wire.decode(raw.get("text", ""))
            run.add_tamper(raw.get("tamper", []))
            return ""
        if kind == "done" and expect in ("start", "hello-or-load"):
            last = run.frames.get(len(run.frames) - 1, {})
            if len(run.frames) == n_cases or last.get("status") in ("todo", "stuck"):
                return ""
            run.add_tamper(f"the sandbox said it was done with {len(run.frames)} of {n_cases} "
                           "cases answered: something wrote into the checker's pipe")  # fmt: skip
            return "malformed"
        if kind == "hello" and expect == "hello":
            expect = "hello-or-load"
            continue
        if (
            kind == "start"
            and expect in ("start", "hello-or-load")
            and raw.get("i") == len(run.frames)
        ):
            current, expect = raw["i"], "case"
            continue
        if kind == "case" and expect == "case" and raw.get("i") == current < n_cases:
            run.frames[current] = raw
            run.add_tamper(raw.get("tamper", []))
            current, expect = None, "start"
            continue
        run.add_tamper(f"the sandbox sent a frame out of order ({kind!r} where {expect!r} was "
                       "due): something wrote into the checker's pipe")  # fmt: skip
        return "malformed"


def _end(zyg: Zygote, pid: int, ended: str) -> tuple[int | None, list[str]]:
    """The sandbox's exit status, then every process below the zygote killed (those the
    learner left running named)."""
    status = zyg.status(pid)
    for _ in range(50):  # its pipe closed as it ended: the exit status follows at once
        if status is not None or ended != "eof":
            break
        time.sleep(0.02)
        status = zyg.status(pid)
    return status, zyg.kill(expected=(pid,))  # the sandbox and all below it


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # the sandbox leads its own session
    except (ProcessLookupError, PermissionError):
        pass


def run_sandbox(zyg: Zygote, name: str, path: str, cases: list, deadline: float) -> SandboxRun:
    """Run ``cases`` of exercise ``name`` on the file ``path`` in a fresh sandbox."""
    run = SandboxRun()
    read_fd, write_fd = os.pipe()
    out = tempfile.TemporaryFile(prefix="minidp-sandbox-")
    payload = {"name": name, "path": path, "cases": cases, "deadline": deadline}
    try:
        pid = zyg.fork("sandbox", payload, write_fd, out.fileno())
        os.close(write_fd)
        write_fd = -1
        ended = run.ended = _read(run, read_fd, len(cases), deadline)
        try:
            status, left = _end(zyg, pid, ended)
        except ZygoteError:  # the zygote is gone: only code under check could have done it
            status, left = None, []
            _kill_session(pid)
            run.add_tamper("the process the check forks from was killed during the check: "
                           "code under check signalled the checker's own processes")  # fmt: skip
        if left and not ended:
            run.add_tamper(
                "left processes running after the check: "
                + "; ".join(left[:3])
                + (f" and {len(left) - 3} more" if len(left) > 3 else "")
                + " — code under check must end what it starts (the check killed them)"
            )
        out.seek(0)
        run.output = out.read().decode(errors="replace")[-20_000:]
        if ended == "stuck":
            run.died = (
                f"the sandbox stopped answering (no answer within {deadline + WATCHDOG_S:g}s) "
                "— a rank stuck where the case deadline cannot reach it (inside C code, a "
                "sleep)? The check killed it."
            )
        elif ended == "eof":
            why = explain(status, run.output)
            if not why:
                where = "before the first case" if run.died_in is None else "during the case"
                why = (
                    f"ERROR: the sandbox ended (exit code {status}) {where} without an answer "
                    "for every case — the code under check exited (sys.exit / os._exit) or "
                    "was killed. A check passes only when every case has an answer."
                )
            run.died = why
    finally:
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)
        out.close()
    return run
