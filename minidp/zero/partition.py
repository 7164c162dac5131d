"""Who owns what: the two ways ZeRO splits the model across ranks.

* :func:`partition_parameters` — whole parameters (ZeRO-1), torch's rule: group by group,
  largest ``numel`` first (stable), each to the rank owning the fewest elements so far
  (lowest on a tie; totals carry across groups). Same owners as torch, so bits compare.
  It balances roughly (one big embedding can outweigh the rest).
* :func:`row_range` — a parameter cut on dim 0 (ZeRO-2, FSDP2's rule, ``torch.chunk``):
  rows ``[r*c, (r+1)*c)`` clipped, ``c = ceil(rows / W)``; balanced to a row per parameter.

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


def rows_per_rank(rows: int, world_size: int) -> int:
    """Rows in a full shard: ``ceil(rows / W)`` (the last ranks may hold fewer)."""
    return -(-rows // world_size)


def row_range(rows: int, world_size: int, rank: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of a dim-0 size ``rows`` that ``rank`` holds (``torch.chunk``)."""
    c = rows_per_rank(rows, world_size)
    return min(rank * c, rows), min((rank + 1) * c, rows)
