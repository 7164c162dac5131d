"""contiguous blocks by count

You cut the parameter list into W blocks of equal COUNT: torch balances the elements —
largest first, each to the rank with the smallest total so far.
"""


def zero1_partition(group_numels, world_size):
    owners = []
    for numels in group_numels:
        per_rank = -(-len(numels) // world_size)  # ceil
        owners.append([min(i // per_rank, world_size - 1) for i in range(len(numels))])
    return owners
