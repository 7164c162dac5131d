"""``parameters_as_bucket_view=True``: each owner's parameters live inside one flat tensor.

As torch's option: the parameters *are* views into one flat bucket per (owner, device)
(``p.data`` pointed at a slice once, here), so the owner broadcasts the bucket in place
and receivers' parameters change with no copy. torch's layout: the owner's trainable
parameters in its optimizer's order; frozen ones stay out (never broadcast), with memory
of their own again. Rebuilt when the trainable set changes or a group is added.

Test: ``pytest tests/test_zero1_interface.py -k bucket``
"""

from __future__ import annotations

import torch


def build_buckets(owned_per_rank: list[list[torch.Tensor]]) -> list[tuple[int, torch.Tensor]]:
    """Make every trainable parameter (``owned_per_rank[r]``: rank r's, in its optimizer's
    order) a view of its owner's flat bucket: ``(owner, 1-D bucket)`` pairs, one per device."""
    buckets: list[tuple[int, torch.Tensor]] = []
    for owner, params in enumerate(owned_per_rank):
        by_device: dict[torch.device, list[torch.Tensor]] = {}
        for p in params:
            if p.requires_grad:
                by_device.setdefault(p.device, []).append(p)
            else:  # out of any old bucket: that memory is about to be released
                p.data = p.data.detach().clone()
        for device, ps in by_device.items():
            # One dtype: ZeroRedundancyOptimizer checked that every parameter shares it.
            bucket = torch.empty(sum(p.numel() for p in ps), dtype=ps[0].dtype, device=device)
            offset = 0
            for p in ps:
                piece = bucket[offset : offset + p.numel()]  # (p.numel(),)
                piece.copy_(p.data.reshape(-1))
                p.data = piece.view_as(p)  # the parameter object stays; its memory moves
                offset += p.numel()
            buckets.append((owner, bucket))
    return buckets


def trainable_mask(params: list[torch.Tensor]) -> list[bool]:
    """Which parameters are trainable: when this changes, the buckets must be rebuilt."""
    return [p.requires_grad for p in params]
