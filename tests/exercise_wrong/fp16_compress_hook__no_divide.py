"""Wrong on purpose: never divides by the world size (the all-reduce sums)."""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    fut = dist.all_reduce(buffer.to(torch.float16), group=state, async_op=True).get_future()

    def decompress(fut):
        buffer.copy_(fut.value()[0])
        return buffer

    return fut.then(decompress)
