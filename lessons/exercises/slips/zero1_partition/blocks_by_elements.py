"""contiguous blocks balanced by elements

You cut the parameters, in their order, into W runs of about equal ELEMENTS: balanced, but
not torch's rule — torch does not keep neighbours together. Go through each group's
parameters largest first and give each to the rank owning the fewest elements so far
(lowest rank on a tie), keeping one running total per rank across the groups.
"""


def zero1_partition(group_numels, world_size):
    flat = [n for numels in group_numels for n in numels]
    share, owners, rank, total = sum(flat) / world_size, [], 0, 0
    for numels in group_numels:
        owned = []
        for n in numels:  # the slip: in order, a new rank once this one holds its share
            if total >= share * (rank + 1) and rank < world_size - 1:
                rank += 1
            owned.append(rank)
            total += n
        owners.append(owned)
    return owners
