"""Which process group a collective runs on, and who we are in it.

minidp's collectives take ``group=None`` like ``torch.distributed``'s. ``None`` means:

1. the group this *thread* was given with :func:`use_group` (thread worlds from
   ``minidp.launch.run_threads`` give every rank-thread its own real gloo group), else
2. the default group made by ``torch.distributed.init_process_group`` (real processes,
   ``minidp.launch.spawn`` or ``torchrun``).

All point-to-point traffic goes through the group object's own ``send``/``recv`` with
*group* ranks, so a subgroup from ``dist.new_group`` works the same way.

Test: ``pytest tests/test_launch.py``
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


def resolve(group=None):
    """Return the group to use: the argument, the thread's group, or the default group."""
    if group is not None:
        return group
    group = getattr(_local, "group", None)
    if group is not None:
        return group
    if dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    raise RuntimeError(
        "minidp.comm: no process group — expected torch.distributed.init_process_group(...) "
        "to have run, a group passed as group=..., or a thread world from "
        "minidp.launch.run_threads; got none of these. Hint: start ranks with "
        "minidp.launch.spawn(fn, world_size) or run the script under torchrun."
    )


def rank_and_size(group=None) -> tuple[int, int]:
    """This rank's index in ``group`` and the group's size."""
    g = resolve(group)
    return g.rank(), g.size()


def get_rank(group=None) -> int:
    return resolve(group).rank()


def get_world_size(group=None) -> int:
    return resolve(group).size()
