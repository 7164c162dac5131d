"""Wrong on purpose: every micro-batch's loss is divided by the number of micro-batches."""


def no_sync_accumulation(ddp, micro_batches, loss_fn):
    k = len(micro_batches)
    for i, batch in enumerate(micro_batches):
        if i < k - 1:
            with ddp.no_sync():
                loss = loss_fn(ddp, batch) * (1.0 / k)
                loss.backward()
        else:
            (loss_fn(ddp, batch) * (1.0 / k)).backward()
