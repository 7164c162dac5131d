"""Wrong on purpose: divides the float16 tensor before the sum, and the result once more."""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(state.size())
    fut = dist.all_reduce(compressed, group=state, async_op=True).get_future()

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value()[0])
        return buffer.div_(state.size())  # the average, averaged again

    return fut.then(decompress)
