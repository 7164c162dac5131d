"""Communication really overlaps backward: traced event order, not wall-clock time.

The model is four 512x512 layers (1 MiB each) with a 1 MiB bucket cap, so after the
rebuild each layer is its own bucket, and a large batch makes each layer's backward take
milliseconds. We record one training step with ``minidp.trace`` and check:

* bucket 0 (last layer) is *launched* before the first layer's gradient is ready — this
  is deterministic: it happens in the hook, on the autograd thread, in program order;
* its all-reduce *starts* on the communication thread before the last gradient is ready
  (the comm thread only has to be scheduled, while three big matmuls remain);
* buckets launch in index order 0, 1, 2, 3;
* with ``overlap=False`` nothing is launched before the last gradient is ready.

Run: ``pytest tests/test_ddp_overlap.py``
"""

from __future__ import annotations

import torch
import torch.nn as nn

import minidp
from minidp import trace


def traced_step(rank: int, world: int, overlap: bool) -> list[tuple]:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(512, 512) for _ in range(4)])
    ddp = minidp.DistributedDataParallel(model, bucket_cap_mb=1, overlap=overlap)
    x = torch.randn(2048, 512, generator=torch.Generator().manual_seed(rank))
    ddp(x).square().mean().backward()  # iteration 1: one bucket, records the ready order
    with trace.recording() as rec:
        ddp(x).square().mean().backward()  # iteration 2: rebuilt, one bucket per layer
    return [(e["name"], e["ts"], e["args"]) for e in rec.events], len(ddp.reducer.buckets)


def _check(events):
    ready = [(ts, a["index"]) for name, ts, a in events if name == "grad ready"]
    launches = [(ts, a["bucket"]) for name, ts, a in events if name == "bucket launch"]
    starts = {int(name.split()[-1]): ts for name, ts, _ in events if name.startswith("all-reduce")}
    return ready, launches, starts


def test_first_bucket_all_reduce_starts_before_last_gradient(process_world):
    for events, n_buckets in process_world(2).run(traced_step, True):
        assert n_buckets == 4
        ready, launches, starts = _check(events)
        assert len(ready) == 8 and [b for _, b in launches] == [0, 1, 2, 3]
        last_ready = max(ts for ts, _ in ready)
        # Event order on the autograd thread: bucket 0 leaves while gradients still come.
        order = [name for name, _, _ in events if name in ("grad ready", "bucket launch")]
        assert order.index("bucket launch") < len(order) - 1 - order[::-1].index("grad ready")
        assert launches[0][0] < last_ready
        # The comm thread picked bucket 0 up while backward was still running.
        assert starts[0] < last_ready, "bucket 0's all-reduce began only after backward"


def test_without_overlap_nothing_leaves_before_backward_ends(process_world):
    for events, _ in process_world(2).run(traced_step, False):
        ready, launches, starts = _check(events)
        last_ready = max(ts for ts, _ in ready)
        assert [b for _, b in launches] == [0, 1, 2, 3]
        assert all(ts >= last_ready for ts, _ in launches)
        assert all(ts >= last_ready for ts in starts.values())
