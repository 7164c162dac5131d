"""Who owns what in ZeRO-1: whole parameters, each on one rank.

:func:`partition_parameters` is torch's rule: group by group, largest ``numel`` first
(stable), each to the rank owning the fewest elements so far (lowest on a tie; totals carry
across groups). Same owners as torch, so bits compare. It balances roughly (one big
embedding can outweigh the rest). ZeRO-2 cuts each parameter on dim 0 instead, balanced to
a row per parameter: FSDP2's rule, ``fsdp/shard.py`` (``shard_range``, ``shard_rows``).

Test: ``pytest tests/test_zero.py -k partition``
"""

from __future__ import annotations

import copy

import torch


def partition_parameters(param_groups: list[dict], world_size: int) -> list[list[dict]]:
    """Split ``param_groups`` into one list of groups per rank (torch's sorted-greedy rule):
    every rank gets one group per input group, maybe empty, with the group's options."""
    sizes = [0] * world_size  # elements owned so far, per rank
    per_rank: list[list[dict]] = [[] for _ in range(world_size)]
    for group in param_groups:
        owned: list[list[torch.Tensor]] = [[] for _ in range(world_size)]
        for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
            rank = sizes.index(min(sizes))  # first rank with the smallest total
            owned[rank].append(p)
            sizes[rank] += p.numel()
        for rank in range(world_size):
            local = copy.copy(group)
            local["params"] = owned[rank]
            per_rank[rank].append(local)
    return per_rank
