"""Which processes this one has left running — to prove a launcher cleaned up after itself:
take ``child_processes()`` before a world and check that nothing new is left after it.

Test: ``pytest tests/test_launch.py tests/test_faults.py``
"""

from __future__ import annotations

import os
import signal
from multiprocessing import resource_tracker


def child_processes() -> set[int]:
    """PIDs of this process's live children (Linux). multiprocessing's resource tracker is
    started first, so it is in every snapshot, never a leftover."""
    resource_tracker.ensure_running()
    return children_of(os.getpid())


def children_of(pid: int) -> set[int]:
    """PIDs of ``pid``'s live (non-zombie) children (``/proc``; empty elsewhere)."""
    found: set[int] = set()
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, ...
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


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
