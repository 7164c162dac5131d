"""The zygote: one clean process (torch imported, no threads, no process group) that forks
every sandbox and reference worker (``minidp.launch`` spawns: a torch import per process).
A *child subreaper*: :meth:`Zygote.kill` kills all below it, orphans too, naming them. A
child gets fds 1, 2 (output), 3 (results) and runs ``minidp.tools.exercise.<target>.main``.
The judge's side is :class:`Zygote`; from ``_tree`` on, the code runs in the zygote."""

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

from minidp.tools.exercise.ranks import receive, send

STARTUP_S = 120.0  # importing torch (and an exercise's warm-up) on a loaded machine


class ZygoteError(RuntimeError):
    """The zygote failed to do what it was asked, or is gone."""


class Zygote:
    """The judge's handle on a zygote (it imports torch while the judge goes on)."""

    def __init__(self) -> None:
        self.sock, theirs = socket.socketpair()
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        start = f"from minidp.tools.exercise.zygote import main; main({theirs.fileno()})"
        self.proc = subprocess.Popen([sys.executable, "-c", start], pass_fds=(theirs.fileno(),),
                                     stdin=subprocess.DEVNULL, env=env)  # fmt: skip
        theirs.close()
        self.lock, self.prepared = threading.Lock(), set()

    def call(self, msg: dict, timeout: float = 60.0, fds: tuple[int, ...] = ()) -> dict:
        with self.lock:
            try:  # a byte carrying the fds, then the message
                socket.send_fds(self.sock, [b"m"], list(fds))
                send(self.sock.fileno(), msg)
            except OSError as exc:
                raise ZygoteError(f"the zygote did not take {msg['op']!r}: {exc}") from exc
            reply = receive(self.sock.fileno(), timeout)
        if reply is None or reply.get("error"):
            raise ZygoteError(reply["error"] if reply else f"no answer to {msg['op']!r}")
        return reply

    def prepare(self, name: str) -> None:
        """The exercise's warm-up (``Exercise.prepare``), once, before anything is forked."""
        if name not in self.prepared:
            self.call({"op": "prepare", "name": name}, STARTUP_S)
            self.prepared.add(name)

    def fork(self, target: str, payload: dict, result_fd: int, output_fd: int) -> int:
        msg = {"op": "fork", "target": target, "payload": payload}
        return self.call(msg, 30.0, fds=(result_fd, output_fd))["pid"]

    def kill(self, pid: int = 0, ended: bool = False) -> tuple[int | None, list[str]]:
        """Kill all below the zygote: ``pid``'s exit status, "pid N: command" of every other."""
        reply = self.call({"op": "kill", "pid": pid, "ended": ended})
        return reply["status"], reply["left"]


_shared: list[Zygote] = []


def shared() -> Zygote:
    """This process's zygote (started on first use, again if it died)."""
    if not _shared:
        atexit.register(lambda: [z.proc.kill() for z in _shared])
    if not _shared or _shared[0].proc.poll() is not None:
        _shared[:] = [Zygote()]
    return _shared[0]


def _tree(root: int) -> list[int]:
    """Live processes below ``root``, through zombies (one whose threads end keeps children)."""
    children: dict[int, list[tuple[int, bool]]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        children.setdefault(int(ppid), []).append((int(entry), state != "Z"))
    found, frontier = [], [root]
    while frontier:
        below = [c for p in frontier for c in children.get(p, [])]
        found += [pid for pid, live in below if live]
        frontier = [pid for pid, _ in below]
    return found


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"pid {pid}: " + f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return f"pid {pid}"


def _kill_all(pid: int, ended: bool) -> dict:
    statuses: dict[int, int] = {}

    def reap() -> None:
        with contextlib.suppress(ChildProcessError):
            while (child := os.waitpid(-1, os.WNOHANG))[0]:
                statuses[child[0]] = os.waitstatus_to_exitcode(child[1])

    for _ in range(50 if ended else 1):  # its pipe closed as it ended: its status follows
        reap()
        if pid in statuses or not ended:
            break
        time.sleep(0.02)
    status = statuses.pop(pid, None)
    left = {p: _describe(p) for p in _tree(os.getpid()) if p != pid}
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if pid:  # each child leads a session of its own: all of it
            os.killpg(pid, signal.SIGKILL)
    for _ in range(200):  # a process forking as fast as it is killed gets 200 rounds
        for p in (pids := _tree(os.getpid())):
            if p != pid and p not in left:
                left[p] = _describe(p)
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        if not pids:
            break
        time.sleep(0.01)
        reap()
    reap()
    return {"status": status, "left": list(left.values())}


def _child(msg: dict, fds: list[int]) -> None:
    """In the forked child: a session, fds 0-3, nothing else open; then the target."""
    code = 0
    try:
        os.setsid()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        for fd, into in ((fds[1], 1), (fds[1], 2), (fds[0], 3)):
            os.dup2(fd, into)
        os.closerange(4, os.sysconf("SC_OPEN_MAX"))
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        module = __import__(f"minidp.tools.exercise.{msg['target']}", fromlist=["main"])
        module.main(msg["payload"], 3)
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return
        traceback.print_exc()
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    import torch

    torch.set_num_threads(1)  # never start a thread pool in a process that forks
    from minidp.tools.exercise.catalogue import find

    sock = socket.socket(fileno=fd)
    while True:
        try:
            marker, fds, _, _ = socket.recv_fds(sock, 1, 8)
        except OSError:
            marker, fds = b"", []
        msg = receive(fd, 60.0) if marker else None  # (only the judge writes here)
        if msg is None:  # the judge is gone: nothing of its checks may outlive it
            _kill_all(0, False)
            return
        reply: dict = {}
        try:
            if msg["op"] == "prepare" and find(msg["name"]).prepare is not None:
                find(msg["name"]).prepare()
            elif msg["op"] == "fork" and (pid := os.fork()) == 0:
                sock.close()
                _child(msg, fds)
            elif msg["op"] == "fork":
                reply["pid"] = pid
            elif msg["op"] == "kill":
                reply = _kill_all(msg["pid"], msg["ended"])
        except Exception as exc:  # tell the judge; keep serving
            reply = {"error": f"zygote: {msg.get('op')}: {type(exc).__name__}: {exc}"}
        finally:
            for f in fds:
                os.close(f)
        send(fd, reply)
