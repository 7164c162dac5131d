"""ties to the highest rank

When several ranks own equally few elements, torch picks the LOWEST of them
(totals.index(min(totals))), not the last one.
"""


def zero1_partition(group_numels, world_size):
    totals, owners = [0] * world_size, []
    for numels in group_numels:
        owned = [0] * len(numels)
        for i in sorted(range(len(numels)), key=lambda i: numels[i], reverse=True):
            low = min(totals)
            rank = max(r for r in range(world_size) if totals[r] == low)
            owned[i] = rank
            totals[rank] += numels[i]
        owners.append(owned)
    return owners
