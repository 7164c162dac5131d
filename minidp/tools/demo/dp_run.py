"""What a recorded DataParallel step is made of: plain data.

Filled by ``dp.py`` (which runs the step) and drawn by ``dp_view.py``; here so that the two
need not import each other.

Test: ``pytest tests/test_dp_demo_bench.py``
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class StepRecord:
    """What one DP step produced, stage by stage (recorded first, printed afterwards)."""

    labels: list[str]  # one per device, "(main)" on device 0
    rows: list[tuple[int, int, str]]  # per used device: first row, last row, chunk shape
    replicas: list[tuple[str, bool, str]]  # per replica: 0.weight shape, shares storage?, grad_fn
    elements: int  # parameter elements copied per other device
    tensors: int  # parameter tensors per replica
    threads: list[str]  # the thread that ran each replica
    outputs: list[torch.Tensor]  # per replica
    out: torch.Tensor  # gathered on the main device
    loss: float
    replica_grads: list[torch.Tensor]  # d loss / d replica[i][0].weight
    grads: list[torch.Tensor]  # the model's .grad after backward


@dataclasses.dataclass
class UpdateRecord:
    """The optimizer step on the main device, and the next step's fresh replicas."""

    lr: float
    before: float  # model[0].weight[0, 0] before the step
    after: float  # ... after it
    replicas_after: list[float]  # replica i's 0.weight[0, 0] at the next step's replicate
    fresh: bool  # every new replica holds the updated weights (torch.equal)
