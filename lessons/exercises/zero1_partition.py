"""Exercise (lesson 19): ZeRO-1's partition — which rank owns (and steps) which parameter.

Task: ``group_numels[g][i]`` is the number of elements of parameter ``i`` of parameter
group ``g``. Return ``owners`` of the same shape: ``owners[g][i]`` is the rank that owns
that parameter, exactly as torch's ``ZeroRedundancyOptimizer`` partitions them
(``_partition_parameters``), so that each rank keeps the optimizer state of about
1/world_size of the elements:

1. keep one running total of owned elements per rank, starting at 0 — and keep it across
   the groups (do not restart it for the next group);
2. in each group, go through the parameters largest first (sort by numel; a stable sort,
   so equal sizes keep their order);
3. give each parameter to the rank with the smallest total so far — on a tie, the lowest
   such rank — and add its numel to that rank's total.

Example: one group [3, 10, 4, 7, 1] on 2 ranks: 10 -> rank 0, 7 -> rank 1, 4 -> rank 1
(7 < 10), 3 -> rank 0 (10 < 11), 1 -> rank 1 (11 < 13): owners [[0, 0, 1, 1, 1]].

Tools: plain Python: ``sorted(range(n), key=..., reverse=True)`` is stable too;
``totals.index(min(totals))`` is the lowest rank with the smallest total.

Hints:
* Balance ELEMENTS, not parameter counts: neither round robin nor equal blocks do that.
* Sort positions (indices), not sizes, so you still know where each parameter goes.

Check: ``python -m minidp exercise check zero1_partition``
"""


def zero1_partition(group_numels: list[list[int]], world_size: int) -> list[list[int]]:
    """The owner rank of every parameter, group by group (torch's sorted greedy rule)."""
    raise NotImplementedError("not implemented yet: largest first, to the lightest rank")
