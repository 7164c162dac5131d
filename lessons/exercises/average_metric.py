"""Exercise (lesson 9): the average of a metric when ranks hold different numbers of samples.

Task: ``values`` holds this rank's per-sample values of a metric (a loss, or 1.0/0.0 for
correct/wrong); ranks hold different numbers of samples, some maybe none. Return, on
every rank, the mean over **every sample of every rank** (a Python float or a 0-dim
tensor) — what one process would get from ``torch.cat(all values).mean()``.

Tools: ``from minidp.comm import all_reduce`` — ``all_reduce(t, group=group)`` sums ``t``
over all ranks, in place. ``group.rank()``, ``group.size()``.

Hints:
* The mean of the per-rank means is wrong whenever shards differ in size: it weights a
  sample of a small shard more than one of a big shard (and an empty shard gives nan).
* All-reduce the sum *and* the count, in float64: ``torch.tensor([values.sum(), n])``,
  then divide once.

Check: ``python -m minidp exercise check average_metric``
"""

import torch

from minidp.comm import all_reduce  # noqa: F401  (you will need it)


def average_metric(values: torch.Tensor, group) -> float:
    """The mean of ``values`` over every sample of every rank (the same on every rank)."""
    raise NotImplementedError("not implemented yet: all-reduce the sum and the count")
