"""hooks on frozen parameters

A parameter with requires_grad=False gets no gradient, so it can have no hook and belongs in
no bucket: build the buckets from [p for p in model.parameters() if p.requires_grad], as
torch DDP does.
"""

import torch


def make_buckets(params, cap_bytes):
    """Last parameter first; close a bucket once it holds >= cap_bytes."""
    buckets, current, size = [], [], 0
    for p in reversed(params):
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= cap_bytes:
            buckets.append(current)
            current, size = [], 0
    return buckets + ([current] if current else [])


def bucketed_ddp(model, group, bucket_cap_bytes, start_all_reduce):
    params = list(model.parameters())  # the slip: requires_grad=False ones too
    buckets = make_buckets(params, bucket_cap_bytes)
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
