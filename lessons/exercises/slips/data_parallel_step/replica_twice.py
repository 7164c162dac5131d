"""a replica counted twice

The gradients are torch's plus one replica's gradient once more: sum each replica's gradient
exactly once — start from the first replica's and add the OTHERS (for c in copies[1:]), or
start from zero and add them all.
"""

import copy
import threading

import torch


def data_parallel_step(model, inputs, targets, loss_fn, devices):
    chunks = inputs.chunk(len(devices))
    replicas = [copy.deepcopy(model) for _ in chunks]
    outputs = [None] * len(chunks)

    def run(i):
        outputs[i] = replicas[i](chunks[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(chunks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    output = torch.cat(outputs)
    loss = loss_fn(output, targets)
    loss.backward()
    with torch.no_grad():
        for p, *copies in zip(model.parameters(), *(r.parameters() for r in replicas)):
            total = copies[0].grad.clone()
            for c in copies:  # the slip: copies[0] again
                total = total + c.grad
            p.grad = total if p.grad is None else p.grad + total
    return output, loss
