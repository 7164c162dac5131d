"""not sorted by size

Greedy is right, but in the given order: sort each group's parameters by numel, LARGEST
first (a stable sort: equal sizes keep their order), then assign.
"""


def zero1_partition(group_numels, world_size):
    totals, owners = [0] * world_size, []
    for numels in group_numels:
        owned = []
        for n in numels:
            rank = totals.index(min(totals))
            owned.append(rank)
            totals[rank] += n
        owners.append(owned)
    return owners
