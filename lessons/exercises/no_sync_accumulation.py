"""Exercise (lesson 13): gradient accumulation with ``no_sync`` — one all-reduce, not K.

Task: ``ddp`` is a ``torch.nn.parallel.DistributedDataParallel``. Run forward and backward
on every micro-batch so that the gradients of all of them accumulate in ``.grad`` and are
all-reduced **once**, at the last micro-batch: ``loss_fn(ddp, batch)`` runs the forward and
returns the loss of one micro-batch; call ``.backward()`` on it.

Tools: ``with ddp.no_sync(): ...`` — inside it, backward only accumulates locally.

Hints:
* DDP decides in the *forward* whether the next backward all-reduces: ``no_sync`` must
  cover the forward (the ``loss_fn`` call) as well as the backward.
* The last micro-batch runs outside ``no_sync``: its backward all-reduces the sum of all
  of them. If every micro-batch is inside, nothing is ever averaged across ranks.

Check: ``python -m minidp exercise check no_sync_accumulation``
"""

from torch import nn


def no_sync_accumulation(ddp: nn.Module, micro_batches: list, loss_fn) -> None:
    """Accumulate every micro-batch's gradient; all-reduce once, at the last one."""
    raise NotImplementedError("not implemented yet: no_sync around all but the last")
