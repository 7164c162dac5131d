"""Wrong on purpose: returns the all-reduce's own future (its value is a list)."""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    compressed = bucket.buffer().to(torch.float16).div_(state.size())
    return dist.all_reduce(compressed, group=state, async_op=True).get_future()
