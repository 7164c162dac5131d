"""found a parameter by its size

A lookup by value, numels.index(size), finds the FIRST parameter of that size every time:
with equal sizes one parameter is assigned twice and another never. Sort the POSITIONS
(sorted(range(len(numels)), key=lambda i: numels[i], reverse=True)).
"""


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
