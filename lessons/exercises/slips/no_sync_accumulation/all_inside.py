"""nothing all-reduced

No all-reduce ran at all, so the ranks' gradients differ: the LAST micro-batch (forward and
backward) must run outside no_sync — that backward all-reduces everything accumulated.
"""


def no_sync_accumulation(ddp, micro_batches, loss_fn):
    with ddp.no_sync():
        for batch in micro_batches:
            loss_fn(ddp, batch).backward()
