"""Exercise (lesson 24): SyncBatchNorm's statistics — mean and variance of the global batch.

Task: ``x`` holds this rank's rows of a batch, shape ``(N_r, C)``, float64; ranks may hold
different numbers of rows (at least one each). Return, on every rank, the per-channel
``(mean, var)`` of the **whole batch** — every row of every rank — two ``(C,)`` float64
tensors, where ``var`` is the *biased* variance (divide by N, not N - 1): what
``torch.nn.SyncBatchNorm`` normalises with, and what ``nn.BatchNorm1d`` would compute on
all the rows in one process.

Tools: ``from minidp.comm import all_reduce`` — ``all_reduce(t, group=group)`` sums ``t``
over all ranks, in place. ``group.rank()``, ``group.size()``. (What to reduce is the
exercise, not how: the collective is given.)

Hints (read one at a time; each gives away a little more):
* The global mean is the sum over every row of every rank, divided by the number of rows
  in all — and no rank knows either of those two numbers on its own.
* The mean of the per-rank means is wrong when ranks hold different numbers of rows; so
  is the average of the per-rank variances — it leaves out how far apart the ranks'
  means lie.
* The variance can be written with global sums only: the mean of x² minus the square of
  the (global) mean. One all-reduce of a packed tensor can carry everything you need.

Check: ``python -m minidp exercise check sync_batchnorm_stats``
"""

import torch

from minidp.comm import all_reduce  # noqa: F401  (you will need it)


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-channel mean and biased variance of every rank's rows, ``(C,)`` each."""
    raise NotImplementedError("not implemented yet: the whole batch's mean and variance")
