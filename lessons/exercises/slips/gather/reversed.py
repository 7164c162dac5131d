"""chunks gathered in the wrong order

Every row is there, but the blocks are out of order: output i belongs to device i and to
rows i*ceil(B/n)... of the batch — concatenate them in device order, not in the order the
replicas finished.
"""

import torch


def gather(outputs: list[torch.Tensor], target_device, dim: int = 0) -> torch.Tensor:
    return torch.cat([o.to(target_device) for o in reversed(outputs)], dim)
