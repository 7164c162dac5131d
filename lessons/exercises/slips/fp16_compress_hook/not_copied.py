"""sum never copied into the bucket

The gradients are this rank's own: in the .then callback copy the all-reduced float16 values
into the bucket's buffer (bucket.buffer().copy_(fut.value()[0])) and return it — a new
tensor that nobody returns is lost.
"""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(state.size())
    fut = dist.all_reduce(compressed, group=state, async_op=True).get_future()

    def decompress(fut):
        averaged = fut.value()[0].to(torch.float32)  # noqa: F841  (a new tensor: lost)
        return buffer

    return fut.then(decompress)
