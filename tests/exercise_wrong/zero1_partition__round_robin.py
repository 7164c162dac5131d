"""Wrong on purpose: parameter k to rank k % W, whatever its size."""


def zero1_partition(group_numels, world_size):
    owners, k = [], 0
    for numels in group_numels:
        owners.append([(k + i) % world_size for i in range(len(numels))])
        k += len(numels)
    return owners
