"""The zygote: one clean process that forks every sandbox and reference worker of a check.

Why a process of its own: the learner's code must run in a process that holds nothing of
the verdict (``sandbox.py``), and it must be cheap to start one per round of cases.
Forking is cheap once torch is imported, but only from a process with no other threads
and no process groups — which the judge is not (it may be a test session, or have
computed references on gloo thread worlds). So the judge starts this process once: it
imports torch and the exercises, then does nothing but fork on request
(``python -c "from minidp.tools.exercise.zygote import main; main(FD)"``, driven over a
socket by :class:`Zygote`).

It is also where the learner's processes end. The zygote is a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``): a process the learner starts and orphans (a ``sleep 300``
started with ``setsid``, double-forked) is re-parented to it, not to init, so
:meth:`Zygote.kill` finds and kills *everything* below it, and names what the learner left
running. It makes itself non-dumpable, so processes of the same user that it forks
cannot read its memory or its file descriptors through ``/proc`` (this does not hold
against root).

Each forked child starts a new session, gets the stdout/stderr file and the result pipe
the judge passed (as fd 1, 2 and 3), closes every other descriptor (the zygote's socket
included), and runs ``minidp.tools.exercise.<target>.main(payload, 3)``.

Test: ``pytest tests/test_exercise_guards.py -k "zygote or leftover"``
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

STARTUP_S = 120.0  # importing torch on a loaded machine
PREPARE_S = 120.0  # an exercise's warm-up imports (torch DDP, optimizers: torch._dynamo)
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36


class ZygoteError(RuntimeError):
    """The zygote failed to do what it was asked."""


# ----------------------------------------------------------------------------- messages


def _send(sock: socket.socket, msg: dict, fds: tuple[int, ...] = ()) -> None:
    body = pickle.dumps(msg)
    socket.send_fds(sock, [struct.pack(">I", len(body))], list(fds))
    sock.sendall(body)


def _recv(sock: socket.socket) -> tuple[dict | None, list[int]]:
    head, fds, _, _ = socket.recv_fds(sock, 4, 8)
    while head and len(head) < 4:
        head += sock.recv(4 - len(head))
    if len(head) < 4:
        return None, fds
    (size,) = struct.unpack(">I", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None, fds
        body += chunk
    return pickle.loads(body), fds  # trusted: only the judge holds the other end


# ----------------------------------------------------------------------------- the judge's side


class Zygote:
    """The judge's handle on a zygote process."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        start = f"from minidp.tools.exercise.zygote import main; main({theirs.fileno()})"
        cmd = [sys.executable, "-c", start]
        self.proc = subprocess.Popen(
            cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=env
        )
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._prepared: set[str] = set()
        self._ready = False  # it imports torch while the judge goes on; asked at first use

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, msg: dict, timeout: float, fds: tuple[int, ...] = ()) -> dict:
        if not self._ready and msg["op"] != "ping":
            self.call({"op": "ping"}, STARTUP_S)
            self._ready = True
        with self._lock:
            self.sock.settimeout(timeout)
            try:
                _send(self.sock, msg, fds)
                reply, _ = _recv(self.sock)
            except (OSError, EOFError) as exc:
                raise ZygoteError(
                    f"the zygote process did not answer {msg['op']!r}: {exc}"
                ) from exc
        if reply is None:
            raise ZygoteError(f"the zygote process ended while asked {msg['op']!r}")
        if reply.get("error"):
            raise ZygoteError(reply["error"])
        return reply

    def prepare(self, name: str) -> None:
        """The exercise's warm-up imports, once, before anything is forked for it."""
        if name not in self._prepared:
            self.call({"op": "prepare", "name": name}, PREPARE_S)
            self._prepared.add(name)

    def fork(self, target: str, payload: dict, result_fd: int, output_fd: int) -> int:
        """Fork ``minidp.tools.exercise.<target>.main(payload, 3)``; returns its pid."""
        msg = {"op": "fork", "target": target, "payload": payload}
        return self.call(msg, 30.0, fds=(result_fd, output_fd))["pid"]

    def status(self, pid: int) -> int | None:
        """The exit status of a forked child (``os.waitstatus_to_exitcode``), None if running."""
        return self.call({"op": "status", "pid": pid}, 30.0)["status"]

    def kill(self, expected: tuple[int, ...] = ()) -> list[str]:
        """SIGKILL every process below the zygote; returns "pid N: command" for each one
        that is not in ``expected`` (what the learner's code left running)."""
        return self.call({"op": "kill", "expected": list(expected)}, 60.0)["left"]

    def close(self) -> None:
        if self.alive:
            self.proc.kill()
        self.proc.wait()
        self.sock.close()


_shared: list[Zygote] = []


def shared() -> Zygote:
    """This process's zygote (started on first use, restarted if it died)."""
    if not _shared or not _shared[0].alive:
        if not _shared:
            atexit.register(lambda: [z.close() for z in _shared])
        _shared[:] = [Zygote()]
    return _shared[0]


# ----------------------------------------------------------------------------- the zygote's side


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no subreaper, the session still groups
        pass


def _tree(root: int) -> list[int]:
    """Live (non-zombie) processes below ``root`` (``/proc``), parents before children.

    Zombies are walked through, not listed: a process whose main thread has exited (a
    zombie leader) while its other threads are still ending keeps its children until the
    last thread is gone — they are below it, and must be found."""
    children: dict[int, list[tuple[int, bool]]] = {}
    if not os.path.isdir("/proc"):  # not Linux: the sessions are killed instead (_kill_all)
        return []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # state, ppid, ...
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append((int(entry), fields[0] != "Z"))
    found, frontier = [], [root]
    while frontier:
        below = [c for p in frontier for c in children.get(p, [])]
        found += [pid for pid, live in below if live]
        frontier = [pid for pid, _ in below]
    return found


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
        return f"pid {pid}: " + " ".join(w.decode(errors="replace") for w in words if w)[:200]
    except OSError:
        return f"pid {pid}"


def _reap(statuses: dict[int, int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        statuses[pid] = os.waitstatus_to_exitcode(status)


def _kill_all(expected: set[int], statuses: dict[int, int]) -> list[str]:
    left = {pid: _describe(pid) for pid in _tree(os.getpid()) if pid not in expected}
    for pid in expected:  # each forked child leads its own session: all of it, at once
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for _ in range(200):  # a process forking as fast as it is killed gets 200 rounds
        pids = _tree(os.getpid())
        if not pids:
            break
        for pid in pids:
            if pid not in expected and pid not in left:
                left[pid] = _describe(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
        _reap(statuses)
    _reap(statuses)
    return list(left.values())


def _child(msg: dict, fds: list[int]) -> None:
    """In the forked child: a session, fds 0-3, nothing else open; then the target."""
    code = 0
    try:
        os.setsid()
        result_fd, output_fd = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        os.dup2(result_fd, 3)
        os.closerange(4, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        module = __import__(f"minidp.tools.exercise.{msg['target']}", fromlist=["main"])
        module.main(msg["payload"], 3)
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return
        import traceback

        traceback.print_exc()
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main(fd: int) -> None:
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_DUMPABLE, 0)
    import torch

    torch.set_num_threads(1)  # never start a thread pool in a process that forks
    from minidp.tools.exercise.catalogue import find

    sock = socket.socket(fileno=fd)
    statuses: dict[int, int] = {}
    while True:
        try:
            msg, fds = _recv(sock)
        except (OSError, EOFError):
            msg, fds = None, []
        if msg is None:  # the judge is gone: nothing of its checks may outlive it
            _kill_all(set(), statuses)
            return
        reply: dict = {}
        try:
            if msg["op"] == "prepare":
                exercise = find(msg["name"])
                if exercise.prepare is not None:
                    exercise.prepare(0, 1)
            elif msg["op"] == "fork":
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    _child(msg, fds)
                reply["pid"] = pid
            elif msg["op"] == "status":
                _reap(statuses)
                reply["status"] = statuses.get(msg["pid"])
            elif msg["op"] == "kill":
                reply["left"] = _kill_all(set(msg["expected"]), statuses)
        except Exception as exc:  # tell the judge; keep serving
            reply = {"error": f"zygote: {msg.get('op')}: {type(exc).__name__}: {exc}"}
        finally:
            for f in fds:
                os.close(f)
        _send(sock, reply)
        _reap(statuses)
