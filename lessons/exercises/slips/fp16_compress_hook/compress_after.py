"""compressed after the all-reduce

You all-reduced the float32 bucket and cast the result to float16 afterwards: no byte was
saved on the wire, and the rounding happens after the sum. Cast BEFORE the all-reduce: that
is what halves the traffic.
"""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    fut = dist.all_reduce(buffer.div_(state.size()), group=state, async_op=True).get_future()

    def decompress(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(fut.value()[0].to(torch.float16))  # "compressed", after the wire
        return buffer

    return fut.then(decompress)
