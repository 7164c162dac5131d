"""Wrong on purpose: a bucket's all-reduce starts the moment the bucket fills, in whatever
order the buckets fill (not in bucket order)."""

import torch


def bucketed_ddp(model, group, bucket_cap_bytes, start_all_reduce):
    params = [p for p in model.parameters() if p.requires_grad]
    buckets, size = [[]], 0
    for p in params[::-1]:
        buckets[-1].append(p)
        size += p.numel() * p.element_size()
        if size >= bucket_cap_bytes:
            buckets.append([])
            size = 0
    buckets = [b for b in buckets if b]
    state = {"left": [len(b) for b in buckets], "started": []}

    def hook(p):
        b = next(i for i, bucket in enumerate(buckets) if any(q is p for q in bucket))
        state["left"][b] -= 1
        if state["left"][b] == 0:
            flat = torch.cat([q.grad.flatten() for q in buckets[b]]) / group.size()
            state["started"].append((b, start_all_reduce(flat)))
        if len(state["started"]) == len(buckets):
            for b, handle in state["started"]:
                summed = handle.wait()
                for q, part in zip(buckets[b], summed.split([q.numel() for q in buckets[b]])):
                    q.grad.copy_(part.view_as(q))
            state["left"] = [len(b) for b in buckets]
            state["started"] = []

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
