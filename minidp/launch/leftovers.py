"""Which processes this one has left running — to prove a launcher cleaned up after itself:
take ``child_processes()`` before a world and check that nothing new is left after it.

Test: ``pytest tests/test_launch.py tests/test_faults.py``
"""

from __future__ import annotations

import os
import signal
from multiprocessing import resource_tracker

from minidp.launch import forkserver


def child_processes() -> set[int]:
    """PIDs of the live processes this one started (Linux): its children, and the ranks the
    fork server forked for it (``forkserver.py``: a rank's parent is the server). The
    resource tracker and the fork server are started first: in every snapshot, never new."""
    resource_tracker.ensure_running()
    forkserver.ensure_running()
    return children_of(os.getpid()) | forked_by_server()


def forked_by_server() -> set[int]:
    """PIDs of the live processes the fork server this one started has forked (ranks)."""
    children = children_of(os.getpid())
    servers = {pid for pid in children if b"multiprocessing.forkserver" in _cmdline(pid)}
    return {pid for server in servers for pid in children_of(server)}


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def children_of(pid: int) -> set[int]:
    """PIDs of ``pid``'s live (non-zombie) children (``/proc``; empty elsewhere)."""
    if not os.path.isdir("/proc"):
        return set()
    found = set()
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is not None and int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def is_running(pid: int) -> bool:
    """Whether ``pid`` is alive and not a zombie (``/proc``)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _stat(pid) -> list[str] | None:
    """``/proc/PID/stat`` after "(comm)": state, ppid, ... (None: no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def kill_descendants(pid: int) -> None:
    """SIGKILL every process below ``pid``, all found first (orphans would be re-parented)."""
    tree, frontier = [], [pid]
    while frontier:
        below = [c for p in frontier for c in children_of(p)]
        tree += below
        frontier = below
    for child in tree:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
