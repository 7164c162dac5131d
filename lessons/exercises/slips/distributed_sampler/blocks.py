"""contiguous blocks instead of a stride

Rank r must take every world-th index starting at r (order[r::world]), not a block of
consecutive ones: that is how torch interleaves the shares.
"""

import torch


def distributed_sampler(n, num_replicas, rank, epoch, seed, shuffle, drop_last):
    order = list(range(n))
    if shuffle:
        g = torch.Generator().manual_seed(seed + epoch)
        order = torch.randperm(n, generator=g).tolist()
    share = n // num_replicas if drop_last else -(-n // num_replicas)
    order += order * num_replicas
    return order[rank * share : (rank + 1) * share]
