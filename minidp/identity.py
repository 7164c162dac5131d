"""Who this thread is: its process group and its rank — the bottom layer of minidp.

``minidp.comm.group`` builds on this (``use_group``, ``resolve``) and ``minidp.trace``
reads :func:`rank` to put each event on its rank's track. Nothing here imports the rest
of minidp, so imports run one way: trace and comm both read it, it reads neither.

The current group is the one given to this *thread* with :func:`use_group` (thread
worlds from ``minidp.launch.run_threads``, DDP's communication thread), else the default
group of ``torch.distributed.init_process_group`` (real processes), else none.

Test: ``pytest tests/test_launch.py tests/test_trace.py``
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch.distributed as dist

_local = threading.local()  # per-thread: the group set by use_group (rank-local)


@contextlib.contextmanager
def use_group(group) -> Iterator[None]:
    """Make ``group`` the current group of this thread while the block runs."""
    previous = getattr(_local, "group", None)
    _local.group = group
    try:
        yield
    finally:
        _local.group = previous


def current_group():
    """This thread's group, else the default group, else ``None`` (no group at all)."""
    group = getattr(_local, "group", None)
    if group is not None:
        return group
    if dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    return None


def is_member(group) -> bool:
    """False for the placeholder ``dist.new_group`` returns on ranks outside the group."""
    return not (isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER)


def rank() -> int:
    """This thread's rank in its current group: -1 outside it, 0 with no group (one process)."""
    group = current_group()
    if group is None:
        return 0
    return group.rank() if is_member(group) else -1


def track_rank() -> int:
    """The rank whose trace track this thread's events go on: the process's global rank
    where ``torch.distributed`` is initialised — a sub-group's rank (HSDP's shard group on
    the communication thread) would put them on another rank's track — else this
    thread's rank in its group (thread worlds)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return rank()
