"""blocking all-reduce in the hook

The gradients are right, but the hook waited for its all-reduce and returned a Future that
was already done: the communication no longer overlaps the rest of backward, which is what
comm hooks are for. Start it with async_op=True and return fut.then(decompress) — DDP waits
for the Future itself, at the end.
"""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    compressed = buffer.to(torch.float16).div_(state.size())
    dist.all_reduce(compressed, group=state)  # the slip: blocks until the sum is here
    buffer.copy_(compressed)
    done = torch.futures.Future()
    done.set_result(buffer)
    return done
