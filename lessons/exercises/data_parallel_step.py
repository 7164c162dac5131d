"""Exercise (lesson 3): one whole DataParallel training step.

Task: with ``n = len(devices)`` simulated devices (``["cpu"] * n``), do what
``torch.nn.DataParallel`` does for one step, and leave the gradient of the whole batch's
loss in ``model``'s ``.grad`` (added to any ``.grad`` already there, as backward does):

1. scatter: ``inputs.chunk(n)`` (a small batch gives fewer chunks: use that many devices);
2. replicate: one copy of ``model`` per used device (``copy.deepcopy`` is fine here);
3. parallel_apply: replica ``i`` runs on chunk ``i``, one ``threading.Thread`` each;
4. gather: ``torch.cat`` the outputs in device order; ONE loss on the whole batch:
   ``loss_fn(output, targets)``; ``loss.backward()``;
5. the parameter server: for every parameter, sum the replicas' gradients in device
   order and add that to the model's parameter ``.grad``.

Return ``(output, loss)``.

Tools: ``copy.deepcopy``, ``threading.Thread``, ``torch.cat``, ``torch.no_grad()``,
``zip(model.parameters(), *(r.parameters() for r in replicas))``.

Hints:
* ``model.grad`` may already hold a gradient (an earlier micro-batch): add to it, do not
  replace it.
* The replicas' gradients are *summed*, not averaged: each is already its share of the
  batch's loss.
* A mean of per-device losses is not the batch's loss when chunks differ in size.
* Stuck? ``minidp/textbook/dp.py`` is a solution (lesson 3 prints it): read it — calling
  it (or torch's DataParallel pieces) is refused in a check.

Check: ``python -m minidp exercise check data_parallel_step``
"""

import copy  # noqa: F401  (you will need these)
import threading  # noqa: F401

import torch
from torch import nn


def data_parallel_step(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn, devices: list
) -> tuple[torch.Tensor, torch.Tensor]:
    """One DP step; returns ``(output, loss)``; model's ``.grad`` holds the batch gradient."""
    raise NotImplementedError("not implemented yet: scatter, replicate, threads, gather, sum")
