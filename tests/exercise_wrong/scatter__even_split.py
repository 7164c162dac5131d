"""Wrong on purpose: splits as evenly as possible (tensor_split: 3, 3, 2, 2), not chunk."""

import torch


def scatter(inputs: tuple, devices: list) -> list[tuple]:
    per_argument = []
    for obj in inputs:
        if isinstance(obj, torch.Tensor):
            chunks = obj.tensor_split(len(devices))
            per_argument.append([c.to(d) for c, d in zip(chunks, devices)])
        else:
            per_argument.append([obj] * len(devices))
    return list(zip(*per_argument))
