"""Cheat 8, giving up what the exercise is about: a blocking all-reduce, then an already
completed Future — torch's bits, and no overlap at all."""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(state.size())
    dist.all_reduce(compressed, group=state)  # blocks until the sum is here
    buffer.copy_(compressed)
    done = torch.futures.Future()
    done.set_result(buffer)
    return done
