"""Which process group a collective runs on, and who we are in it.

Test: ``pytest tests/test_launch.py``

``group=None``: the group this *thread* was given (:func:`use_group`), else the default
group. Messages use *group* ranks; public arguments (``broadcast(src=...)``) are global, as
in torch. Outside a subgroup a collective warns and does nothing, like torch's.
"""

from __future__ import annotations

import warnings

import torch.distributed as dist

# The thread's group lives in the bottom layer (trace reads it too); re-exported here.
from minidp.identity import current_group, is_member
from minidp.identity import use_group as use_group


def resolve(group=None):
    """Return the group to use: the argument, the thread's group, or the default group."""
    if group is not None:
        return group
    group = current_group()
    if group is not None:
        return group
    raise RuntimeError(
        "minidp.comm: no process group — expected torch.distributed.init_process_group(...) "
        "to have run, a group passed as group=..., or a thread world from "
        "minidp.launch.run_threads; got none of these. Hint: start ranks with "
        "minidp.launch.spawn(fn, world_size) or run the script under torchrun."
    )


def skip_if_not_member(group, who: str) -> bool:
    """True (after torch's warning) if this rank is not in ``group``: skip the collective."""
    if is_member(group):
        return False
    warnings.warn(
        f"Running {who} on global rank {dist.get_rank()} which does not belong to the given group.",
        stacklevel=3,
    )
    return True


def get_rank(group=None) -> int:
    """This rank's index in ``group``; -1 if it is not a member (like torch)."""
    g = resolve(group)
    return g.rank() if is_member(g) else -1


def get_world_size(group=None) -> int:
    """The number of ranks in ``group``; -1 if this rank is not a member (like torch)."""
    g = resolve(group)
    return g.size() if is_member(g) else -1


def global_ranks(group) -> list[int] | None:
    """Global rank of each group rank; ``None`` if torch does not know it (a thread world's)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        return dist.get_process_group_ranks(group)
    except (KeyError, ValueError, RuntimeError):
        return None


def to_group_rank(group, global_rank, who: str, name: str = "src") -> int:
    """The group rank of ``global_rank``, or a ValueError naming the group's ranks (non-int
    input is returned unchanged, for the caller's own check)."""
    ranks = global_ranks(group)
    if ranks is None or not isinstance(global_rank, int):
        return global_rank
    if global_rank not in ranks:
        raise ValueError(
            f"{who}: {name}={global_rank} is a global rank, and it is not in this group, whose "
            f"ranks are {ranks} — expected one of those. Hint: {name}= names a global rank, as "
            f"in torch.distributed; pass group_{name}= for a rank counted within the group"
        )
    return ranks.index(global_rank)
