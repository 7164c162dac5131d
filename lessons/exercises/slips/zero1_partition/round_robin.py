"""round robin

Parameter k went to rank k % W, whatever its size: torch balances the ELEMENTS each rank
owns — give each parameter, largest first, to the rank that owns the fewest elements so far.
"""


def zero1_partition(group_numels, world_size):
    owners, k = [], 0
    for numels in group_numels:
        owners.append([(k + i) % world_size for i in range(len(numels))])
        k += len(numels)
    return owners
