"""Record one ``DistributedDataParallel`` step for real: hooks, buckets, overlap.

    python -m minidp classroom --no-serve --only ddp --out /tmp/cls

Rank *processes* (``minidp.launch.ProcessWorld``: overlap is about time, so each rank has
its own interpreter) wrap the same MLP in ``minidp.DistributedDataParallel`` with a small
bucket cap (several buckets). Step 1 runs untraced: it records the order gradients arrive
in, and the buckets are rebuilt in that order at the next forward. Step 2 is recorded by
``minidp.trace``: the library itself emits ``forward``, ``ddp buckets`` (the layout this
backward fills), ``grad ready`` (one per parameter, from its autograd hook),
``bucket launch``, ``all-reduce bucket N`` (on the communication thread),
``bucket finish`` and ``wait for buckets``. The only span added here is ``backward``
around ``loss.backward()`` — what a user's script would add to see its backward.

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp import trace
from minidp.tools.classroom.rec_fsdp import mlp


def _ddp_rank(rank: int, world: int, width: int, depth: int, cap_mb: float) -> list[dict]:
    import minidp

    ddp = minidp.DistributedDataParallel(mlp(width, depth), bucket_cap_mb=cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for step in range(2):
        x, y = torch.randn(64, width, generator=g), torch.randn(64, 4, generator=g)
        opt.zero_grad(set_to_none=True)
        if step == 1:
            with trace.recording() as rec:
                loss = nn.functional.mse_loss(ddp(x), y)
                with trace.span("backward", lane="compute"):
                    loss.backward()
        else:
            nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [e for e in rec.events if e["name"] not in ("send", "recv")]


def ddp_events(world, width: int = 128, depth: int = 3, buckets: int = 3) -> list:
    """One traced DDP step (after the bucket rebuild) on ``world`` (a ProcessWorld), the
    bucket cap set so that the gradients fill about ``buckets`` buckets at any width."""
    plain = mlp(width, depth).parameters()  # nothing sharded: each parameter whole
    model_bytes = sum(p.numel() * p.element_size() for p in plain)  # global
    cap_mb = model_bytes / (buckets + 0.5) / 2**20  # torch's bucket_cap_mb counts MiB
    results = world.run(_ddp_rank, width, depth, cap_mb, timeout=120.0)
    return [e for r in results for e in r]
