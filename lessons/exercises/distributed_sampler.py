"""Exercise (lesson 12): DistributedSampler — which samples this rank reads in this epoch.

Task: return the dataset indices rank ``rank`` of ``num_replicas`` reads in epoch
``epoch``, exactly as ``torch.utils.data.DistributedSampler`` after ``set_epoch(epoch)``:

1. the order: ``list(range(n))``, or if ``shuffle`` a permutation that is the SAME on every
   rank — ``torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))``;
2. make its length a multiple of ``num_replicas``: if ``drop_last``, cut the tail;
   otherwise pad by repeating the order from its start (10 samples on 3 ranks -> 12);
3. rank ``r`` takes every ``num_replicas``-th index starting at ``r``.

Example: n=10, 3 ranks, no shuffle -> rank 0 [0, 3, 6, 9], rank 1 [1, 4, 7, 0],
rank 2 [2, 5, 8, 1].

Tools: ``torch.Generator``, ``torch.randperm(n, generator=g).tolist()``, slicing
``order[start::step]``.

Hints:
* ``seed + epoch`` is the whole point of ``set_epoch``: without the epoch every epoch
  replays the same order.
* Every rank must get the same count: DDP runs one all-reduce per step on every rank.
* A tiny dataset (n < num_replicas) may need its order repeated more than once.

Check: ``python -m minidp exercise check distributed_sampler``
"""

import torch  # noqa: F401  (you will need it)


def distributed_sampler(
    n: int, num_replicas: int, rank: int, epoch: int, seed: int, shuffle: bool, drop_last: bool
) -> list[int]:
    """The indices of a dataset of ``n`` samples that ``rank`` reads in ``epoch``."""
    raise NotImplementedError("not implemented yet: shared order, pad or cut, stride")
