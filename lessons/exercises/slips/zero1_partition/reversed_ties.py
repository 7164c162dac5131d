"""equal sizes in reverse order

You sorted ascending and reversed the list: parameters of equal size then come last-first.
torch's sort is stable — sorted(range(n), key=..., reverse=True) keeps equal sizes in their
order.
"""


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
