"""sorted smallest first

You sorted the parameters by size ASCENDING: torch gives the LARGEST first (sorted(...,
reverse=True)), so the big ones spread over the ranks before the small ones fill the gaps.
"""


def zero1_partition(group_numels, world_size):
    totals, owners = [0] * world_size, []
    for numels in group_numels:
        owned = [0] * len(numels)
        for i in sorted(range(len(numels)), key=lambda i: numels[i]):
            rank = totals.index(min(totals))
            owned[i] = rank
            totals[rank] += numels[i]
        owners.append(owned)
    return owners
