"""Wrong on purpose: sorts the sizes, then finds each parameter with numels.index(size) —
equal sizes all land on the first parameter of that size."""


def zero1_partition(group_numels, world_size):
    totals, owners = [0] * world_size, []
    for numels in group_numels:
        owned = [0] * len(numels)
        for size in sorted(numels, reverse=True):
            i = numels.index(size)
            rank = totals.index(min(totals))
            owned[i] = rank
            totals[rank] += size
        owners.append(owned)
    return owners
