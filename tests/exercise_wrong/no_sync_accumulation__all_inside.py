"""Wrong on purpose: every micro-batch inside ``no_sync``, the last one too."""


def no_sync_accumulation(ddp, micro_batches, loss_fn):
    with ddp.no_sync():
        for batch in micro_batches:
            loss_fn(ddp, batch).backward()
