"""buckets launched in the order they fill

You start each bucket as soon as its last gradient arrives, whatever its place: with a
branch or a reused layer a later bucket can fill first, and then the ranks' all-reduces
(and DDP's) go in another order. Start buckets in bucket order — a bucket waits for the
ones before it, and starts as soon as they all have.
"""

import torch


def make_buckets(params, cap_bytes):
    buckets, current, size = [], [], 0
    for p in reversed(params):
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= cap_bytes:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def bucketed_ddp(model, group, bucket_cap_bytes, start_all_reduce):
    params = [p for p in model.parameters() if p.requires_grad]
    buckets = make_buckets(params, bucket_cap_bytes)
    bucket_of = {p: b for b, bucket in enumerate(buckets) for p in bucket}
    pending = [len(b) for b in buckets]
    handles = {}

    def hook(param):
        b = bucket_of[param]
        pending[b] -= 1
        if pending[b] == 0:  # the slip: launched when full, not in bucket order
            flat = torch.cat([p.grad.reshape(-1) * (1.0 / group.size()) for p in buckets[b]])
            handles[b] = start_all_reduce(flat)
        if len(handles) == len(buckets):
            for b, bucket in enumerate(buckets):
                flat, offset = handles[b].wait(), 0
                for p in bucket:
                    p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
            pending[:] = [len(b) for b in buckets]
            handles.clear()

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
