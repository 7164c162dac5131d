"""Wrong on purpose: each group cut into W consecutive blocks of equal count."""


def zero1_partition(group_numels, world_size):
    owners = []
    for numels in group_numels:
        per_rank = -(-len(numels) // world_size)  # ceil
        owners.append([min(i // per_rank, world_size - 1) for i in range(len(numels))])
    return owners
