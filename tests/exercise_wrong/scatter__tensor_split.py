"""Wrong on purpose: tensors are cut with tensor_split (as even as possible), not chunk."""

import torch


def scatter(inputs, devices):
    n = len(devices)
    pieces = [x.tensor_split(n) if isinstance(x, torch.Tensor) else [x] * n for x in inputs]
    return [tuple(p[i] for p in pieces) for i in range(n)]
