"""Who owns what: the two ways ZeRO splits the model across ranks.

* :func:`partition_parameters` — whole parameters, torch's ``ZeroRedundancyOptimizer``
  rule (ZeRO-1): for each parameter group in order, sort its parameters by ``numel``,
  largest first (a stable sort: ties keep their order), and give each one to the rank
  that owns the fewest elements so far (the lowest such rank on a tie). The running
  totals carry over from one group to the next. Same rule, same owners, same optimizer
  state on each rank as torch's — which is what makes the bits comparable.
* :func:`row_range` — one parameter cut on dim 0 (ZeRO-2 here, FSDP2's rule): rank
  ``r`` holds rows ``[r*c, (r+1)*c)`` clipped to the parameter, ``c = ceil(rows / W)``,
  exactly ``torch.chunk``; trailing ranks may hold fewer rows, or none.

Whole parameters keep the optimizer's per-tensor arithmetic untouched but balance only
roughly (one big embedding can outweigh the rest); rows balance to within one row per
parameter, at the price of cutting every tensor.

Test: ``pytest tests/test_zero.py -k partition``
"""

from __future__ import annotations

import copy

import torch


def partition_parameters(param_groups: list[dict], world_size: int) -> list[list[dict]]:
    """Split ``param_groups`` into one list of groups per rank (torch's sorted-greedy rule).

    Every rank gets one group per input group (possibly with no parameters), carrying the
    input group's options, so the local optimizers see the same hyper-parameters.
    """
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
