"""bucket closed past the cap

A bucket closes as soon as it holds >= bucket_cap_bytes (torch's rule), not only when it
exceeds the cap: with a cap of 216 bytes, gradients of 24 + 192 bytes make one full bucket.
"""

import torch


def bucketed_ddp(model, group, bucket_cap_bytes, start_all_reduce):
    params = [p for p in model.parameters() if p.requires_grad]
    buckets, open_, size = [], [], 0
    for p in reversed(params):
        open_.append(p)
        size += p.numel() * p.element_size()
        if size > bucket_cap_bytes:  # the slip: > where torch has >=
            buckets.append(open_)
            open_, size = [], 0
    if open_:
        buckets.append(open_)
    bucket_of = {p: b for b, bucket in enumerate(buckets) for p in bucket}
    pending = [len(b) for b in buckets]
    handles = []

    def hook(param):
        pending[bucket_of[param]] -= 1
        while len(handles) < len(buckets) and pending[len(handles)] == 0:
            bucket = buckets[len(handles)]
            flat = torch.cat([p.grad.reshape(-1) * (1.0 / group.size()) for p in bucket])
            handles.append(start_all_reduce(flat))
        if len(handles) == len(buckets):
            for bucket, handle in zip(buckets, handles):
                flat, offset = handle.wait(), 0
                for p in bucket:
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
            pending[:] = [len(b) for b in buckets]
            handles.clear()

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
