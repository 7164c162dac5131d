"""Exercise (lesson 2): gather — the replicas' outputs back on one device.

Task: ``outputs[i]`` is what replica ``i`` returned for its chunk of the batch. Return one
tensor on ``target_device``: the outputs concatenated along ``dim`` (the batch dimension),
in **device order**, like ``torch.nn.parallel.gather``.

Tools: ``torch.cat(tensors, dim)``, ``tensor.to(device)``.

Hints:
* Output ``i`` holds the rows of chunk ``i``; any other order puts predictions next to the
  wrong labels (threads may *finish* in any order — the list is still in device order).
* The batch is not always along dim 0: use ``dim``.
* Its backward needs nothing from you: ``torch.cat`` hands each replica its slice of the
  gradient.

Check: ``python -m minidp exercise check gather``
"""

import torch


def gather(outputs: list[torch.Tensor], target_device, dim: int = 0) -> torch.Tensor:
    """The outputs, in device order, concatenated along ``dim`` on ``target_device``."""
    raise NotImplementedError("not implemented yet: concatenate the outputs on one device")
