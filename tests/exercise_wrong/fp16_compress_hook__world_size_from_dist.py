"""Wrong on purpose (subgroup): the average is taken over dist.get_world_size() — the default
group's size — though DDP may run on a subgroup (``state``)."""

import torch
import torch.distributed as dist


def fp16_compress_hook(
    state: dist.ProcessGroup, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    world = dist.get_world_size()
    half = bucket.buffer().to(torch.float16)
    half.div_(world)
    work = dist.all_reduce(half, group=state, async_op=True)
    return work.get_future().then(lambda f: bucket.buffer().copy_(f.value()[0]))
