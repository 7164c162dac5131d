"""sorted across the groups

You sorted every group's parameters together: torch goes group by group (the running totals
carry over), sorting each group's parameters on their own.
"""


def zero1_partition(group_numels, world_size):
    totals = [0] * world_size
    owners = [[0] * len(numels) for numels in group_numels]
    every = [(g, i) for g, numels in enumerate(group_numels) for i in range(len(numels))]
    every.sort(key=lambda gi: group_numels[gi[0]][gi[1]], reverse=True)
    for g, i in every:
        rank = totals.index(min(totals))
        owners[g][i] = rank
        totals[rank] += group_numels[g][i]
    return owners
