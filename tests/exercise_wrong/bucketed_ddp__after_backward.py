"""Wrong on purpose: right buckets, but every all-reduce starts only in the last hook."""

import torch

from minidp.ddp.textbook import make_buckets


def bucketed_ddp(model, group, bucket_cap_bytes, start_all_reduce):
    params = [p for p in model.parameters() if p.requires_grad]
    buckets = make_buckets(params, bucket_cap_bytes)
    seen = []

    def hook(param):
        seen.append(param)
        if len(seen) < len(params):
            return
        seen.clear()
        for bucket in buckets:  # everything leaves after the whole backward
            flat = torch.cat([p.grad.reshape(-1) * (1.0 / group.size()) for p in bucket])
            total, offset = start_all_reduce(flat).wait(), 0
            for p in bucket:
                p.grad.copy_(total[offset : offset + p.numel()].view_as(p))
                offset += p.numel()

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
