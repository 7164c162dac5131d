"""Wrong on purpose: the running totals restart at zero in every parameter group."""


def zero1_partition(group_numels, world_size):
    owners = []
    for numels in group_numels:
        totals = [0] * world_size
        owned = [0] * len(numels)
        for i in sorted(range(len(numels)), key=lambda i: numels[i], reverse=True):
            rank = totals.index(min(totals))
            owned[i] = rank
            totals[rank] += numels[i]
        owners.append(owned)
    return owners
