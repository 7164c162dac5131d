"""Reference solution: one DataParallel step, written out (lesson 3 prints minidp's own,
``minidp/textbook/dp.py``; the check makes that one unavailable).

Check: ``python -m minidp exercise check data_parallel_step --path lessons/solutions/data_parallel_step.py``
"""

import copy
import threading

import torch
from torch import nn


def data_parallel_step(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn, devices: list
) -> tuple[torch.Tensor, torch.Tensor]:
    devices = [torch.device(d) for d in devices]
    chunks = [c.to(d) for c, d in zip(inputs.chunk(len(devices)), devices)]  # scatter
    used = devices[: len(chunks)]  # a small batch makes fewer chunks than devices
    replicas = [copy.deepcopy(model).to(d) for d in used]  # replicate, every step
    for r in replicas:
        r.zero_grad(set_to_none=True)
    outputs = [None] * len(used)

    def run(i: int) -> None:
        outputs[i] = replicas[i](chunks[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(used))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    output = torch.cat([o.to(used[0]) for o in outputs])  # gather, in device order
    loss = loss_fn(output, targets.to(used[0]))  # ONE loss on the whole batch
    loss.backward()
    with torch.no_grad():  # the parameter server: sum the replicas' gradients, in order
        for p, *copies in zip(model.parameters(), *(r.parameters() for r in replicas)):
            if copies[0].grad is None:
                continue
            total = copies[0].grad.to(used[0])
            for c in copies[1:]:
                total = total + c.grad.to(used[0])
            p.grad = total if p.grad is None else p.grad + total
    return output, loss
