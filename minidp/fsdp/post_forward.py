"""``reshard_after_forward=k`` (an int): after forward keep the unit sharded over k ranks only.

FSDP2's middle way between whole (``False``: memory) and sharded over all W ranks
(``True``: backward gathers across every rank, across nodes): each rank keeps 1/k, and
backward gathers within its k-group (a node): as FSDP2, a row of the mesh seen as ``(-1, k)``.
FSDP2's checks: k divides the shard group; 1 means ``False`` (warned), the size ``True``.

Test: ``pytest tests/test_fsdp_controls.py -k reshard_to``
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from minidp.comm import all_gather
from minidp.comm import group as groups
from minidp.fsdp import shard


def check(reshard_after_forward, shard_size: int) -> bool | int:
    """FSDP2's rules: a bool as is (``None``: ``True``); an int k must divide ``shard_size``."""
    if reshard_after_forward is None:
        return True
    if not isinstance(reshard_after_forward, (bool, int)):
        raise ValueError(
            "reshard_after_forward should be a bool or an int representing the group size to "
            f"reshard to, not {reshard_after_forward}"
        )
    if isinstance(reshard_after_forward, bool):
        return reshard_after_forward
    k = reshard_after_forward
    if k < 1 or k > shard_size or shard_size % k != 0:
        raise ValueError(  # FSDP2's words: the same refusal
            f"If passing reshard_after_forward as an int, it should be a factor of {shard_size}, "
            f"not {k}"
        )
    if k == 1:
        warnings.warn(
            "reshard_after_forward=1 (int) means resharding parameters to world size 1, "
            "instead of reshard_after_forward=True (bool)",
            stacklevel=3,
        )
        return False
    return True if k == shard_size else k


def make_group(mesh_ranks: torch.Tensor, k: int):
    """This rank's k-group; every rank creates every row's group, in order (torch's rule)."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"fully_shard: expected torch.distributed to be initialized for "
            f"reshard_after_forward={k} (its k-rank groups are torch.distributed groups), got "
            "none. Hint: start the ranks with minidp.launch.spawn or torchrun"
        )
    me, mine = dist.get_rank(), None
    for row in mesh_ranks.reshape(-1, k).tolist():
        group = dist.new_group(row)
        if me in row:
            mine = group
    return mine


def mesh_ranks(mesh, group) -> torch.Tensor:
    """Global ranks in the mesh's layout (a 1-D group: its ranks in order)."""
    if mesh is not None:
        return mesh.mesh
    ranks = groups.global_ranks(group)
    if ranks is None:
        raise RuntimeError(
            "fully_shard: expected a torch.distributed group for an int reshard_after_forward, "
            "got a thread world's group. Hint: run the ranks as processes (minidp.launch.spawn)"
        )
    return torch.tensor(ranks, device="cpu")  # (explicit: under torch.device("meta") too)


@torch.no_grad()
def keep(full: list[torch.Tensor], group) -> list[torch.Tensor]:
    """This rank's padded chunk (over the k-group) of each full parameter (copies)."""
    k, r = group.size(), group.rank()
    return [shard.padded_shard(p.detach(), k, r) for p in full]


def gather(kept: list[torch.Tensor], shapes: list[torch.Size], group) -> list[torch.Tensor]:
    """All-gather the kept chunks within the k-group: the full parameters (a collective)."""
    local = torch.cat([t.reshape(-1) for t in kept]) if kept else torch.empty(0)  # (T_k,)
    rows = [torch.empty_like(local) for _ in range(group.size())]
    all_gather(rows, local, group=group)
    return shard.uncat(torch.stack(rows), shapes, group.size())  # (k, T_k) -> fulls
