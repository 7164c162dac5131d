"""Reference solution: ZeRO-1's owners, torch's sorted greedy rule (minidp has it as
``minidp.zero.partition.partition_parameters``, on real parameter groups).

Check: ``python -m minidp exercise check zero1_partition --path lessons/solutions/zero1_partition.py``
"""


def zero1_partition(group_numels: list[list[int]], world_size: int) -> list[list[int]]:
    totals = [0] * world_size  # elements owned so far, per rank — across every group
    owners = []
    for numels in group_numels:
        owned = [0] * len(numels)
        for i in sorted(range(len(numels)), key=lambda i: numels[i], reverse=True):
            rank = totals.index(min(totals))  # the lowest rank with the smallest total
            owned[i] = rank
            totals[rank] += numels[i]
        owners.append(owned)
    return owners
