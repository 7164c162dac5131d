"""Record one ``DistributedDataParallel`` step for real: hooks, buckets, overlap.

    python -m minidp classroom --no-serve --only ddp --out /tmp/cls

``world`` thread-ranks, each with its own real gloo group, wrap the same MLP in
``minidp.DistributedDataParallel`` with a small bucket cap (several buckets). Step 1 runs
untraced: it records the order gradients arrive in, and the buckets are rebuilt in that
order at the next forward. Step 2 is recorded by ``minidp.trace``: the library itself
emits ``forward``, ``grad ready`` (one per parameter, from its autograd hook),
``bucket launch``, ``all-reduce bucket N`` (on the communication thread), ``bucket finish``
and ``wait for buckets``. The only event added here is the bucket layout (which
parameters each bucket holds, read from the reducer), so the page can fill them.

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp import trace

LANE = "classroom"


def _model(width: int, depth: int) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 4))


def _ddp_rank(rank: int, world: int, width: int, depth: int, cap_mb: float) -> list[dict]:
    import minidp

    ddp = minidp.DistributedDataParallel(_model(width, depth), bucket_cap_mb=cap_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for step in range(2):
        x, y = torch.randn(64, width, generator=g), torch.randn(64, 4, generator=g)
        opt.zero_grad(set_to_none=True)
        if step == 1:
            with trace.recording() as rec:
                nn.functional.mse_loss(ddp(x), y).backward()
        else:
            nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    mine = [e for e in rec.events if e["pid"] == rank]  # every thread's recording sees all
    reducer = ddp.reducer
    layout = [
        {"bucket": b.index, "bytes": b.nbytes, "params": [reducer.names[i] for i in b.indices]}
        for b in reducer.buckets
    ]
    start = min(e["ts"] for e in mine)
    mine.append({"name": "ddp buckets", "ph": "i", "s": "t", "ts": start, "pid": rank,
                 "tid": LANE, "args": {"buckets": layout, "world": world}})  # fmt: skip
    return mine


def ddp_events(world: int, width: int = 128, depth: int = 3, cap_mb: float = 0.07) -> list:
    """One traced DDP step (after the bucket rebuild) on ``world`` thread-ranks."""
    from minidp.launch import run_threads

    if world < 2:
        raise ValueError(f"classroom ddp: --world-size must be at least 2, got {world}")
    results = run_threads(_ddp_rank, world, width, depth, cap_mb, timeout=60.0)
    return [e for r in results for e in r if e["name"] not in ("send", "recv")]
