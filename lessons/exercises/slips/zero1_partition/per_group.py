"""totals restarted in every group

Keep ONE running total per rank across all the parameter groups: torch does not restart at
zero for the next group, so a later group fills the ranks the earlier ones left light.
"""


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
