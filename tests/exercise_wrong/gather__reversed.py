"""Wrong on purpose: concatenates in the order the replicas "finished" (here: reversed)."""

import torch


def gather(outputs: list[torch.Tensor], target_device, dim: int = 0) -> torch.Tensor:
    return torch.cat([o.to(target_device) for o in reversed(outputs)], dim)
