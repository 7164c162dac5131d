"""Wrong on purpose: largest first, by reversing an ascending sort — equal sizes come out
last-first."""


def zero1_partition(group_numels, world_size):
    totals, owners = [0] * world_size, []
    for numels in group_numels:
        owned = [0] * len(numels)
        for i in sorted(range(len(numels)), key=lambda i: numels[i])[::-1]:
            rank = totals.index(min(totals))
            owned[i] = rank
            totals[rank] += numels[i]
        owners.append(owned)
    return owners
