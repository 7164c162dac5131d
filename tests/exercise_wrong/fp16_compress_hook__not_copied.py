"""Wrong on purpose: the float16 sum is cast back into a NEW tensor; the bucket keeps its
own (this rank's) gradients."""

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
