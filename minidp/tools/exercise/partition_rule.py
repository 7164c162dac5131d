"""ZeRO-1's partition rule and its classic slips, in plain Python: torch's
``ZeroRedundancyOptimizer._partition_parameters`` (``_greedy``, no flag), each flag one
slip, and the owners read from a real ZeRO (``_torch_owners``).

Test: ``pytest tests/test_exercise_set_b.py -k partition``
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


def _torch_owners(zero, params: list[list[nn.Parameter]], group) -> list[list[int]]:
    """Owner rank of every parameter, per group, as torch's ZeRO partitioned them."""
    where = {id(p): (g, i) for g, ps in enumerate(params) for i, p in enumerate(ps)}
    owners = [[-1] * len(ps) for ps in params]
    partition = getattr(zero, "_partition_parameters", None)
    if partition is not None:
        per_rank = [[where[id(p)] for pg in groups for p in pg["params"]] for groups in partition()]
    else:  # public: each rank knows its own share; gather every rank's
        mine = [where[id(p)] for pg in zero.optim.param_groups for p in pg["params"]]
        per_rank = [None] * dist.get_world_size(group)
        dist.all_gather_object(per_rank, mine, group=group)
    for rank, places in enumerate(per_rank):
        for g, i in places:
            owners[g][i] = rank
    return owners


def _greedy(
    groups,
    world: int,
    *,
    sort="descending",
    ties_high=False,
    per_group=False,
    index_by_value=False,
    by_count=False,
) -> list:
    """torch's rule; each flag is one classic slip. ``sort``: "descending" (torch's, stable),
    "none", "ascending", or "reversed" (an ascending sort reversed: equal sizes reversed)."""
    totals, counts, owners = [0] * world, [0] * world, []
    for numels in groups:
        if per_group:
            totals, counts = [0] * world, [0] * world
        order = list(range(len(numels)))
        if sort == "descending":
            order = sorted(order, key=lambda i: numels[i], reverse=True)  # stable
        elif sort == "ascending":
            order = sorted(order, key=lambda i: numels[i])
        elif sort == "reversed":
            order = sorted(order, key=lambda i: numels[i])[::-1]
        owned = [0] * len(numels)
        for i in order:
            if index_by_value:  # numels.index(size): equal sizes all land on the first one
                i = numels.index(numels[i])
            load = counts if by_count else totals
            lightest = [r for r in range(world) if load[r] == min(load)]
            rank = lightest[-1] if ties_high else lightest[0]
            owned[i] = rank
            totals[rank] += numels[i]
            counts[rank] += 1
        owners.append(owned)
    return owners


def _sorted_across_groups(groups, world: int) -> list:
    """One sort over every group's parameters together, then the greedy rule."""
    flat = [(g, i) for g, numels in enumerate(groups) for i in range(len(numels))]
    flat.sort(key=lambda gi: groups[gi[0]][gi[1]], reverse=True)
    totals, owners = [0] * world, [[0] * len(numels) for numels in groups]
    for g, i in flat:
        rank = totals.index(min(totals))
        owners[g][i] = rank
        totals[rank] += groups[g][i]
    return owners


def _round_robin(groups, world: int) -> list:
    """Parameter k (counting on through the groups, or from 0 in each) to rank k % W."""
    flat, answers, k = [], [], 0
    for numels in groups:
        flat.append([(k + i) % world for i in range(len(numels))])
        k += len(numels)
    answers.append(flat)
    answers.append([[i % world for i in range(len(numels))] for numels in groups])
    return answers


def _blocks(groups, world: int) -> list:
    """Consecutive blocks by count: ceil(n / W) per rank, or n // W with the first n % W
    ranks one more (``torch.tensor_split``'s way); per group or over all parameters."""

    def split(n: int) -> list[list[int]]:
        ceil = -(-n // world)
        by_ceil = [min(i // ceil, world - 1) for i in range(n)] if n else []
        even = [int(r) for r, chunk in enumerate(torch.arange(n).tensor_split(world))
                for _ in range(len(chunk))]  # fmt: skip
        return [by_ceil, even]

    answers = [list(per) for per in zip(*(split(len(numels)) for numels in groups))]
    total = sum(len(numels) for numels in groups)
    for flat in split(total):
        out, k = [], 0
        for numels in groups:
            out.append(flat[k : k + len(numels)])
            k += len(numels)
        answers.append(out)
    return answers
