"""Reference solution: torch's fp16_compress_hook, step by step.

Check: ``python -m minidp exercise check fp16_compress_hook --path lessons/solutions/fp16_compress_hook.py``
"""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()  # float32, flat: this bucket's gradients
    compressed = buffer.to(torch.float16).div_(state.size())  # cast, then divide in fp16
    fut = dist.all_reduce(compressed, group=state, async_op=True).get_future()

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value()[0])  # the float16 sum, back into the float32 bucket
        return buffer

    return fut.then(decompress)
