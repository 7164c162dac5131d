"""changed the caller's x

The statistics are right, but x is the caller's batch — the layer normalises exactly those
rows next — and your function changed it in place (x -= mean, x.pow_(2), ...). Work on new
tensors: (x - mean) makes one; x.sub_(mean) does not.
"""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    c = x.shape[1]
    totals = torch.cat([x.sum(0), torch.tensor([float(x.shape[0])], dtype=x.dtype)])
    all_reduce(totals, group=group)
    mean = totals[:c] / totals[c]
    x -= mean  # the slip: centred in place
    squares = (x * x).sum(0)
    all_reduce(squares, group=group)
    return mean, squares / totals[c]
