"""mean² from the local mean

E[x²] is global, but the mean you square is this rank's own: var = E[x²] - M² needs the
GLOBAL mean M — the one you return — or ranks normalise differently.
"""

import torch

from minidp.comm import all_reduce


def sync_batchnorm_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor]:
    c = x.shape[1]
    totals = torch.cat([x.sum(0), (x * x).sum(0), torch.tensor([float(len(x))], dtype=x.dtype)])
    all_reduce(totals, group=group)
    n = totals[-1]
    mean = totals[:c] / n
    return mean, totals[c : 2 * c] / n - x.mean(0) ** 2  # the local mean, squared
