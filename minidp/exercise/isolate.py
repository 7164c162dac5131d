"""Run a check in a child process, so that nothing the learner's code does can end the
command with a wrong exit code — and gloo aborting is explained.

Three ways a check could end without a verdict, and what this file makes of them:

* gloo ends the whole process (``std::terminate``: "Received data size doesn't match
  expected size") when a rank receives a message *larger* than the buffer it posted. No
  Python code can catch that;
* the learner's code exits: ``os._exit(0)`` inside the function ends the process with
  code 0, which a grading script would read as a pass;
* the process is killed, or crashes.

So ``python -m minidp exercise check`` runs the checker in a child (``--in-process``),
streams its output, and trusts only the *verdict file*: the child writes one JSON line
per case and a last line with the verdict once every case has one. No last line means no
verdict — exit 2, whatever the child's exit code — and every failing case the child did
record is shown again (an abort in case 7 must not hide the WRONG of case 3).

Exit codes: 0 every case passed; 1 a case failed (wrong, raised, deadlock, not
implemented yet); 2 no verdict: usage error, unknown exercise, a file that cannot be
imported, or a check process that crashed, aborted or exited early.

Test: ``pytest tests/test_exercises.py -k abort`` and ``tests/test_exercise_guards.py``
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

PASS, FAIL, ERROR = 0, 1, 2  # the command's exit codes

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


def explain(returncode: int, stderr: str) -> str:
    """Why the child died, for the learner; "" if it exited normally."""
    if returncode >= 0 and returncode != 134:  # 134: abort() seen through a shell
        return ""
    sizes = next((m for m in (pattern.search(stderr) for pattern in SIZES) if m), None)
    if sizes:
        got, room = (int(v) for v in sizes.groups())
        ratio = got // room if room and got % room == 0 else 0
        hint = DTYPE_HINT.format(ratio=ratio) if ratio in (2, 4, 8) else SIZE_HINT
        return (
            "ABORTED: gloo stopped the check process during the case above: a rank received "
            f"a message of {got} bytes into a receive buffer of {room} bytes.\n{hint}"
        )
    tail = "\n".join(stderr.strip().splitlines()[-5:])
    return f"ABORTED: the check process died (code {returncode}) during the case above:\n{tail}"


def read_records(path: str) -> list[dict]:
    """The verdict file's JSON lines (a line cut short by a crash is skipped)."""
    records = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except OSError:
        pass
    return records


def earlier_failures(records: list[dict]) -> str:
    """The failing cases the child recorded before it died, with their hints."""
    lines = []
    for r in records:
        if r.get("event") == "case" and r.get("status") not in ("pass", None):
            lines.append(f"  case {r['i']:>2}  {r['case']}: {r['status'].upper()} — {r['detail']}")
            if r.get("hint"):
                lines.append(f"           hint ({r['mistake']}): {r['hint']}")
    if not lines:
        return ""
    return "Before that, these cases had failed:\n" + "\n".join(lines)


def run(argv: list[str], capture: bool = False) -> tuple[int, str, str, list[dict]]:
    """``python -m minidp exercise ARGV --in-process``; returns (exit code, stdout, why,
    the verdict file's records).

    stdout streams to ours unless ``capture``; stderr is kept to explain an abort (and
    passed on when there is nothing to explain). ``why`` is "" when the child gave a
    verdict, else what happened instead.
    """
    fd, verdict = tempfile.mkstemp(prefix="minidp-verdict-", suffix=".jsonl")
    os.close(fd)
    try:
        cmd = [sys.executable, "-m", "minidp", "exercise", *argv, "--in-process"]
        cmd += ["--verdict-file", verdict]
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE if capture else None, stderr=subprocess.PIPE, text=True
        )
        records = read_records(verdict)
    finally:
        os.unlink(verdict)
    end = next((r for r in reversed(records) if r.get("event") == "end"), None)
    if end is not None:  # every case had its verdict: that is the answer, however it ended
        if proc.stderr:
            sys.stderr.write(proc.stderr)
        return int(end.get("exit", ERROR)), proc.stdout or "", "", records
    why = explain(proc.returncode, proc.stderr)
    if not why:
        last = max((r["i"] for r in records if r.get("event") == "case"), default=0)
        after = f"after case {last}" if last else "before the first case"
        why = (
            f"ERROR: the check process ended (exit code {proc.returncode}) {after} without "
            "a verdict for every case — the code under check exited (sys.exit / os._exit) "
            "or the process was killed. A check passes only when every case has a verdict."
        )
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        why += f"\n{tail}" if tail else ""
    before = earlier_failures(records)
    return ERROR, proc.stdout or "", why + (f"\n{before}" if before else ""), records
