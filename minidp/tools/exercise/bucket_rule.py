"""DDP's bucket rule in plain Python (``_walk``: no flag is torch's, each flag a classic
slip) and torch's own function called as DDP's rebuild calls it (``torch_buckets``).
``bucket_assignment.py`` says what the rule is and why it is ordered so.

Test: ``pytest tests/test_exercise_set_b.py -k bucket``
"""

from __future__ import annotations

import torch
import torch.distributed as dist

# _walk's flags, one classic slip each
SLIPS = ("forward", "past_cap", "one_cap", "mixed", "shared_limits", "crossing_next",
         "elements", "drop_open", "sorted_order")  # fmt: skip


def _walk(
    numels: list[int],
    dtypes: list[str],
    limits: list[int],
    *,
    forward: bool = False,
    past_cap: bool = False,
    one_cap: bool = False,
    mixed: bool = False,
    shared_limits: bool = False,
    crossing_next: bool = False,
    elements: bool = False,
    drop_open: bool = False,
    sorted_order: bool = False,
) -> list[list[int]]:
    """torch's rule in plain Python; each flag is one classic slip (for the mistakes)."""
    order = list(range(len(numels))) if forward else list(reversed(range(len(numels))))
    open_: dict[str, list] = {}  # key -> [indices, bytes], in order of first appearance
    step: dict[str, int] = {}  # key -> position in limits
    closed: list[list[int]] = []

    def close(key: str, limit_key: str) -> None:
        closed.append(open_[key][0])
        open_[key] = [[], 0]
        step[limit_key] = min(step[limit_key] + 1, len(limits) - 1)

    for i in order:
        key = "any" if mixed else dtypes[i]
        limit_key = "any" if shared_limits else key
        bucket = open_.setdefault(key, [[], 0])
        size = numels[i] * (1 if elements else getattr(torch, dtypes[i]).itemsize)
        pos = step.setdefault(limit_key, 0)
        cap = limits[-1] if one_cap else limits[pos]
        if crossing_next:  # closes BEFORE the parameter that would cross, which starts anew
            if bucket[0] and bucket[1] + size > cap:
                close(key, limit_key)
            open_[key][0].append(i)
            open_[key][1] += size
            continue
        bucket[0].append(i)
        bucket[1] += size
        if bucket[1] > cap if past_cap else bucket[1] >= cap:
            close(key, limit_key)
    still_open = [] if drop_open else [b[0] for b in reversed(open_.values()) if b[0]]
    buckets = closed + still_open
    if sorted_order:  # by each bucket's first parameter in the walk
        where = {i: n for n, i in enumerate(order)}
        buckets.sort(key=lambda b: where[b[0]])
    return buckets


def torch_buckets(numels: list[int], dtypes: list[str], limits: list[int]) -> list[list[int]]:
    """torch's own assignment as DDP's rebuild calls it: the walk (last parameter first)
    and its positions as ``tensor_indices`` (private function; the port where a torch
    lacks it)."""
    compute = getattr(dist, "_compute_bucket_assignment_by_size", None)
    if compute is None:
        return _walk(numels, dtypes, limits)
    last = len(numels) - 1
    walk = [
        torch.empty(numels[i], dtype=getattr(torch, dtypes[i]), device="meta")
        for i in reversed(range(len(numels)))
    ]
    positions = list(range(len(walk)))
    buckets = compute(walk, limits, [False] * len(walk), positions)[0]  # not sorted
    return [[last - j for j in bucket] for bucket in buckets]
