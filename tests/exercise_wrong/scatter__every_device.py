"""Wrong on purpose: always fills every device, with empty chunks when the batch is small."""

import math

import torch


def scatter(inputs: tuple, devices: list) -> list[tuple]:
    n = len(devices)
    out = []
    for i, d in enumerate(devices):
        args = []
        for obj in inputs:
            if isinstance(obj, torch.Tensor):
                size = math.ceil(len(obj) / n)
                args.append(obj[i * size : (i + 1) * size].to(d))
            else:
                args.append(obj)
        out.append(tuple(args))
    return out
