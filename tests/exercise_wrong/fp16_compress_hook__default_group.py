"""Wrong on purpose: all-reduces on the default group, not on ``state``, the group DDP hands
the hook (where DDP runs on a subgroup, that hangs)."""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(state.size())
    fut = dist.all_reduce(compressed, async_op=True).get_future()  # no group=: the default

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value()[0])
        return buffer

    return fut.then(decompress)
