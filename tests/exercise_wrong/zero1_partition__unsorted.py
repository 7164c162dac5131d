"""Wrong on purpose: greedy to the lightest rank, but in the given order (no sort)."""


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
