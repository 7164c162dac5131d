"""loss divided by the number of micro-batches

The gradients are 1/K of torch's: with no_sync the micro-batches' gradients ADD UP in .grad,
and DDP's reference (a loss per micro-batch, backward on each) does not scale them — here
the exercise (like DDP's documented pattern) wants the plain sum. Call
loss_fn(ddp, batch).backward() as it is.
"""


def no_sync_accumulation(ddp, micro_batches, loss_fn):
    k = len(micro_batches)
    with ddp.no_sync():
        for batch in micro_batches[:-1]:
            (loss_fn(ddp, batch) / k).backward()  # the slip: scaled by 1/K
    (loss_fn(ddp, micro_batches[-1]) / k).backward()
