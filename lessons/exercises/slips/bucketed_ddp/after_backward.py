"""all-reduce after backward, no overlap

The gradients are right, but no bucket left before the last gradient was ready: start a
bucket's all-reduce in the hook that completes it, and wait only in the hook of the very
last gradient.
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
