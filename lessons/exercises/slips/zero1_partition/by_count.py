"""balanced parameter counts

You gave each parameter to the rank owning the fewest PARAMETERS: torch balances ELEMENTS —
the rank whose owned numels add up to the least.
"""


def zero1_partition(group_numels, world_size):
    counts, owners = [0] * world_size, []
    for numels in group_numels:
        owned = [0] * len(numels)
        for i in sorted(range(len(numels)), key=lambda i: numels[i], reverse=True):
            rank = counts.index(min(counts))
            owned[i] = rank
            counts[rank] += 1
        owners.append(owned)
    return owners
