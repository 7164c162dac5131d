"""Which processes this one has left running — to prove a launcher cleaned up after itself.

    before = minidp.launch.child_processes()
    ...                                    # spawn a world, make a rank fail
    assert minidp.launch.child_processes() <= before

Test: ``pytest tests/test_launch.py tests/test_faults.py``
"""

from __future__ import annotations

import os
from multiprocessing import resource_tracker


def child_processes() -> set[int]:
    """PIDs of this process's live (non-zombie) children, on Linux (``/proc``).

    multiprocessing's resource tracker — a helper process started by the first ``spawn``
    and kept for the life of the program — is started first, so it is in every snapshot
    and never counted as a leftover rank.
    """
    resource_tracker.ensure_running()
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, ...
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.add(int(entry))
    return found
