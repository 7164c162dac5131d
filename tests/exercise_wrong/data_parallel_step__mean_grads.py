"""Wrong on purpose: the replicas' gradients are averaged on the main device, not summed."""

import copy
import threading

import torch


def data_parallel_step(model, inputs, targets, loss_fn, devices):
    xs = inputs.chunk(len(devices))
    replicas = [copy.deepcopy(model) for _ in xs]
    for r in replicas:
        r.zero_grad(set_to_none=True)
    outs = [None] * len(xs)

    def run(i):
        outs[i] = replicas[i](xs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    output = torch.cat(outs)
    loss = loss_fn(output, targets)
    loss.backward()
    with torch.no_grad():
        for p, *copies in zip(model.parameters(), *(r.parameters() for r in replicas)):
            g = torch.stack([c.grad for c in copies]).mean(0)
            p.grad = g if p.grad is None else p.grad + g
    return output, loss
