"""Reference solution: torch's documented pattern (lesson 13 shows both wrong ways).

Check: ``python -m minidp exercise check no_sync_accumulation --path lessons/solutions/no_sync_accumulation.py``
"""

from torch import nn


def no_sync_accumulation(ddp: nn.Module, micro_batches: list, loss_fn) -> None:
    with ddp.no_sync():  # forward AND backward: no all-reduce for these
        for batch in micro_batches[:-1]:
            loss_fn(ddp, batch).backward()
    loss_fn(ddp, micro_batches[-1]).backward()  # syncs the accumulated sum, once
