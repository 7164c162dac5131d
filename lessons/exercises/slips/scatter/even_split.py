"""even split instead of chunk

Your chunks are as even as possible (tensor_split), but torch's scatter uses
tensor.chunk(n): every chunk has ceil(B/n) rows and the last one what is left (batch 10 on 4
devices: 3, 3, 3, 1).
"""

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
