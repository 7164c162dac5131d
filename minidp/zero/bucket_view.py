"""``parameters_as_bucket_view=True``: each owner's parameters live inside one flat tensor.

Without it, ZeRO-1 (``zero1.py``) concatenates an owner's updated parameters into a
fresh flat tensor for every broadcast, and each receiver copies the pieces back out: two
extra copies of the model per step. With it (torch's option of the same name), the
parameters *are* views into one flat bucket per (owner, device): ``p.data`` is pointed
at a slice of the bucket once, here, so the owner broadcasts the bucket in place and a
receiver's parameters change with no copy at all.

The layout is torch's: an owner's trainable parameters in the order its local optimizer
sees them (``owned_parameters(owner)``), one bucket per device. Frozen parameters
(``requires_grad=False``) are never broadcast (nobody updates them), so they stay out:
each gets memory of its own again, in case an earlier build had put it in a bucket that
is about to be dropped. The buckets are rebuilt when the set of trainable parameters
changes or a parameter group is added.

The optimizer's arithmetic runs on the same values either way (a view holds the same
numbers), so the bits match torch's with and without the option.

Test: ``pytest tests/test_zero1_interface.py -k bucket``
"""

from __future__ import annotations

import torch


def build_buckets(owned_per_rank: list[list[torch.Tensor]]) -> list[tuple[int, torch.Tensor]]:
    """Make every trainable parameter a view of its owner's flat bucket.

    Args:
        owned_per_rank: ``owned_per_rank[r]``: the parameters rank ``r`` updates, in its
            local optimizer's order (the same lists on every rank).

    Returns:
        ``(owner, bucket)`` pairs, owners in rank order: ``bucket`` is a 1-D tensor of the
        owner's trainable parameters on one device, which now alias it. Owners with no
        trainable parameters get no bucket (there is nothing to send).
    """
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
