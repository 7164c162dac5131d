"""a chunk for every device

A small batch makes fewer chunks than devices (batch 5 on 4 devices: 2, 2, 1): use only as
many devices as tensor.chunk returns chunks — no empty chunks.
"""

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
