"""Reference solution: gather — ``torch.cat`` in device order on the target device.

Check: ``python -m minidp exercise check gather --path lessons/solutions/gather.py``
"""

import torch


def gather(outputs: list[torch.Tensor], target_device, dim: int = 0) -> torch.Tensor:
    return torch.cat([o.to(target_device) for o in outputs], dim)
