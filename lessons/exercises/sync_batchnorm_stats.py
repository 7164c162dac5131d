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

Hints:
* Pack what you need into one tensor and all-reduce it once:
  ``torch.cat([x.sum(0), (x * x).sum(0), torch.tensor([float(len(x))], dtype=x.dtype)])``
  — then mean = Σx / N and var = Σx² / N - mean².
* The mean of the per-rank means is wrong when ranks hold different numbers of rows.
* The average of the per-rank variances leaves out the spread *between* the ranks'
  means. And the count is global too: all-reduce it with the sums.

Check: ``python -m minidp exercise check sync_batchnorm_stats``
"""

import torch

from minidp.comm import all_reduce  # noqa: F401  (you will need it)


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-channel mean and biased variance of every rank's rows, ``(C,)`` each."""
    raise NotImplementedError("not implemented yet: all-reduce [Σx, Σx², count], then divide")
