"""Reference solution: scatter — the rule of ``minidp.dp.scatter`` (and torch's) for a flat
tuple of arguments.

Check: ``python -m minidp exercise check scatter --path lessons/solutions/scatter.py``
"""

import torch


def scatter(inputs: tuple, devices: list) -> list[tuple]:
    per_argument = []
    for obj in inputs:
        if isinstance(obj, torch.Tensor):
            chunks = obj.chunk(len(devices))  # ceil(B/n) rows each; maybe fewer chunks
            per_argument.append([c.to(d) for c, d in zip(chunks, devices)])
        else:
            per_argument.append([obj] * len(devices))  # the same object on every device
    return list(zip(*per_argument))  # stops at the fewest chunks
