"""Wrong on purpose: divides in float32, then casts to float16."""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = (buffer / state.size()).to(torch.float16)
    fut = dist.all_reduce(compressed, group=state, async_op=True).get_future()

    def decompress(fut):
        buffer.copy_(fut.value()[0])
        return buffer

    return fut.then(decompress)
