"""no_sync that does not cover the forward

Every micro-batch was all-reduced: DDP decides in the FORWARD whether the next backward
syncs, so `with ddp.no_sync():` must wrap the forward and the backward of every micro-batch
but the last.
"""


def no_sync_accumulation(ddp, micro_batches, loss_fn):
    for batch in micro_batches[:-1]:
        loss = loss_fn(ddp, batch)  # forward outside no_sync
        with ddp.no_sync():
            loss.backward()
    loss_fn(ddp, micro_batches[-1]).backward()
