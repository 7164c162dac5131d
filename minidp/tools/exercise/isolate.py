"""The judge's side of a sandbox: start it, read its frames (by length, in order: else it is
tampering), then kill it and all below the zygote, naming what was left running. One that
ends early leaves no verdict; no frame for ``deadline + WATCHDOG_S`` seconds: stuck."""

import contextlib
import os
import signal
import tempfile
from dataclasses import dataclass, field

from minidp.tools.exercise import wire
from minidp.tools.exercise.zygote import Zygote, ZygoteError

WATCHDOG_S = 15.0  # past the case deadline: the sandbox itself has stopped answering
START_S = 60.0  # the first frame (the sandbox imports nothing new: the zygote did)


@dataclass
class SandboxRun:
    """What one sandbox answered, per file, and how it ended."""

    frames: dict[int, dict[int, dict]] = field(default_factory=dict)  # file -> case -> frame
    load_errors: dict[int, str] = field(default_factory=dict)
    tamper: dict[int, list[str]] = field(default_factory=dict)  # file -> findings, in order
    died: str = ""  # why it ended before its last frame ("" if it did not)
    died_in: tuple[int, int] | None = None  # (file, case) it was running then
    ended: str = ""  # "" (its last frame came), "eof", "stuck" or "malformed"
    output: str = ""  # what the code under check printed (stdout and stderr)

    def add_tamper(self, j: int, findings) -> None:
        seen = {f for fs in self.tamper.values() for f in fs}
        for f in findings if isinstance(findings, list) else [findings]:
            if isinstance(f, str) and f not in seen:
                self.tamper.setdefault(j, []).append(wire.decode(f))
                seen.add(f)


def _read(run: SandboxRun, fd: int, files: int, cases: int, deadline: float) -> str:
    """Read frames until ``done``: "", else what ended the reading ("eof", "stuck", ...)."""
    last, why = (-1, -1), ""
    while not why:
        loaded = len(run.frames) + len(run.load_errors)
        try:
            raw = wire.read_frame(fd, START_S if not loaded else deadline + WATCHDOG_S)
        except TimeoutError:
            return "stuck"
        except wire.Malformed as exc:
            raw, why = {}, f"sent a malformed answer ({exc})"
        if raw is None:
            return "eof"
        raw = raw if isinstance(raw, dict) else {}
        kind, j, i = raw.get("kind"), raw.get("j"), raw.get("i")
        if not isinstance(j, int) or not isinstance(i, (int, type(None))):
            j, i = -1, None
        run.add_tamper(j if j >= 0 else max(last[0], 0), raw.get("tamper", []))
        if kind == "file" and j == loaded < files:
            if raw.get("load_error"):
                run.load_errors[j] = wire.decode(raw["load_error"])
            else:
                run.frames[j] = {}
        elif kind == "case" and j in run.frames and i is not None and last < (j, i) < (j, cases):
            run.frames[j][i], last = raw, (j, i)
        elif kind == "done":
            ends = [fs[max(fs)].get("status") for fs in run.frames.values() if fs]
            done = [len(fs) == cases or (fs and fs[max(fs)].get("status") == "todo")
                    for fs in run.frames.values()]  # fmt: skip
            if loaded == files and (all(done) or "stuck" in ends):  # (it stops at a stuck case)
                return ""
            answered = sum(len(fs) for fs in run.frames.values())
            why = f"said it was done with {answered} of {files * cases} cases answered"
        else:
            why = why or f"sent a frame out of order ({kind!r})"
    run.add_tamper(max(last[0], 0), f"the sandbox {why}: something wrote into the checker's pipe")
    return "malformed"


def _running(run: SandboxRun, files: int) -> tuple[int, int] | None:
    """The (file, case) a sandbox that ended early was running: the first not answered."""
    for j, fs in run.frames.items() if len(run.frames) + len(run.load_errors) == files else ():
        if not fs or fs[max(fs)].get("status") not in ("todo", "stuck"):
            return j, max(fs, default=-1) + 1
    return None


def run_sandbox(zyg: Zygote, name: str, paths: list[str], cases: list, deadline: float):
    """Run ``cases`` of exercise ``name`` on each file of ``paths`` in one fresh sandbox."""
    run, (read_fd, write_fd) = SandboxRun(), os.pipe()
    out = tempfile.TemporaryFile(prefix="minidp-sandbox-")
    payload = {"name": name, "paths": paths, "cases": cases, "deadline": deadline}
    try:
        try:
            pid = zyg.fork("sandbox", payload, write_fd, out.fileno())
        finally:
            os.close(write_fd)
        run.ended = _read(run, read_fd, len(paths), len(cases), deadline)
        run.died_in = _running(run, len(paths)) if run.ended in ("eof", "stuck") else None
        try:
            status, left = zyg.kill(pid, ended=run.ended == "eof")  # it and all below it
        except ZygoteError:  # the zygote is gone: only code under check could have done it
            status, left = None, []
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            run.add_tamper(0, "the process the check forks from was killed during the check: "
                           "code under check signalled the checker's own processes")  # fmt: skip
        if left and not run.ended:
            more = f" and {len(left) - 3} more" if len(left) > 3 else ""
            run.add_tamper(max(run.frames, default=0), "left processes running after the "
                           f"check: {'; '.join(left[:3])}{more} — code under check must end "
                           "what it starts (the check killed them)")  # fmt: skip
        out.seek(0)
        run.output = out.read().decode(errors="replace")[-20_000:]
        if run.ended == "stuck":
            run.died = (f"the sandbox stopped answering (no answer within {deadline + WATCHDOG_S:g}"
                        "s) — a rank stuck where the case deadline cannot reach it (inside C "
                        "code, a sleep)? The check killed it.")  # fmt: skip
        elif run.ended == "eof":
            where = "before the first case" if run.died_in is None else "during the case"
            tail = "\n".join(run.output.strip().splitlines()[-5:])
            run.died = (f"ABORTED: the sandbox died (code {status}) during this case:\n{tail}"
                        if status is None or status < 0 or status == 134 else  # a signal
                f"ERROR: the sandbox ended (exit code {status}) {where} without an answer for "
                "every case — the code under check exited (sys.exit / os._exit) or was "
                "killed. A check passes only when every case has an answer.")  # fmt: skip
    finally:
        os.close(read_fd)
        out.close()
    return run
