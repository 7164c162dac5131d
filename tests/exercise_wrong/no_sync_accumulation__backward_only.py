"""Wrong on purpose: ``no_sync`` around the backward only — the forward already armed DDP."""


def no_sync_accumulation(ddp, micro_batches, loss_fn):
    for batch in micro_batches[:-1]:
        loss = loss_fn(ddp, batch)  # forward outside no_sync
        with ddp.no_sync():
            loss.backward()
    loss_fn(ddp, micro_batches[-1]).backward()
