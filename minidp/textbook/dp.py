"""DataParallel in one function: scatter -> replicate -> parallel_apply -> gather, then backward.

Why this exists: the faithful :class:`minidp.DataParallel` is four files (``scatter.py``,
``replicate.py``, ``parallel_apply.py``, ``gather.py``) because it handles every input
structure and hides itself inside ``forward``. The *idea* fits on one screen: read
:func:`data_parallel_step` top to bottom (its threads: :func:`parallel_apply`), then
lesson 3 shows what the faithful one adds.

Both give the same bits: the output is ``cat([model(c) for c in x.chunk(n)])`` and each
gradient is the per-replica gradients summed on the main device in device order,
``((g0 + g1) + g2) + ...``.

Test: ``pytest tests/test_textbook_dp_ddp.py -k data_parallel``
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Sequence

import torch
from torch import nn


def parallel_apply(replicas: list[nn.Module], chunks: list[torch.Tensor]) -> list:
    """``replicas[i](chunks[i])`` for every i, one thread each; a replica's error is raised."""
    outputs, errors = [None] * len(replicas), []

    def run(i: int) -> None:
        try:
            outputs[i] = replicas[i](chunks[i])
        except Exception as exc:  # a thread's exception would vanish: hand it over
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(replicas))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return outputs


def data_parallel_step(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    devices: Sequence[str | int | torch.device],
) -> tuple[torch.Tensor, torch.Tensor]:
    """One DataParallel training step; returns ``(output, loss)`` on ``devices[0]``.

    Afterwards ``model``'s ``.grad`` holds the gradient of ``loss`` over the whole batch
    (added to any ``.grad`` already there). ``devices=["cpu"] * 4`` simulates 4 devices.
    """
    devices = [torch.device(d) for d in devices]
    if not devices or len(inputs) == 0:
        raise ValueError(
            f"data_parallel_step: expected at least one device and one sample, got "
            f"{len(devices)} device(s) and a batch of {len(inputs)} — skip empty batches"
        )
    # 1. scatter: one chunk of ceil(B/n) rows per device. A batch smaller than n makes
    #    fewer chunks (batch 5 on 4 devices: 2, 2, 1), and only that many devices work.
    chunks = [c.to(d) for c, d in zip(inputs.chunk(len(devices)), devices)]  # (<=ceil(B/n), ...)
    used = devices[: len(chunks)]
    # 2. replicate: a full copy of the model on every device, EVERY step (the weights
    #    changed since the last one). Each copy's parameters are leaves of their own.
    replicas = [copy.deepcopy(model).to(d) for d in used]
    for r in replicas:
        r.zero_grad(set_to_none=True)
    # 3. parallel_apply: replica i runs on chunk i, one thread each (one process).
    outputs = parallel_apply(replicas, chunks)
    # 4. gather: the outputs, concatenated on the main device; the loss is computed there.
    output = torch.cat([o.to(used[0]) for o in outputs])  # (B, ...)
    loss = loss_fn(output, targets.to(used[0]))
    # backward: cat's backward hands replica i the rows of d loss/d output it produced.
    loss.backward()
    # The parameter server: replica gradients summed on the main device, in device order.
    with torch.no_grad():
        for p, *copies in zip(model.parameters(), *(r.parameters() for r in replicas)):
            if copies[0].grad is None:
                continue  # frozen, or not used by the loss
            total = copies[0].grad.to(used[0])
            for c in copies[1:]:
                total = total + c.grad.to(used[0])  # ((g0 + g1) + g2) + ...: order = bits
            p.grad = total if p.grad is None else p.grad + total
        for b, b0 in zip(model.buffers(), replicas[0].buffers()):
            b.copy_(b0)  # replica 0 IS the model in torch: its BatchNorm stats persist
    return output, loss


# What the engine adds (:class:`minidp.DataParallel`, lesson 3):
#
# * it is a module: the step is split across ``forward`` and the caller's ``backward``, so
#   replicate is a differentiable broadcast (``replicate.Broadcast``) whose backward *is*
#   the sum above — here the sum is written out after ``loss.backward()``;
# * replicas are shallow copies sharing everything but the tensors, and replica 0 *is* the
#   model (here: ``copy.deepcopy`` per device, and replica 0's buffers are copied back);
# * inputs of any structure (tuples, dicts, namedtuples, kwargs), outputs of any structure;
# * the caller's grad mode, autocast and CUDA stream carried into each thread, a failing
#   replica re-raised with its index and device, checks that the model sits on
#   ``device_ids[0]``.
