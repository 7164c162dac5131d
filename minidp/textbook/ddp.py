"""DDP in one screen: gradient hooks, buckets in reverse order, one all-reduce per full bucket.

Why this exists: the faithful :class:`minidp.DistributedDataParallel` (``distributed.py``,
``reducer.py``, ``buckets.py``, ...) reproduces torch's reducer bit for bit, which takes
300 lines of bookkeeping. The idea is smaller — read this file top to bottom:

1. **same start**: rank 0's parameters and buffers are broadcast to every rank;
2. **buckets**: parameters are grouped, *last layer first* (backward produces its
   gradients first), into buckets of about ``bucket_cap_mb``;
3. **hooks**: one per parameter, called when its ``.grad`` is ready; when a bucket's last
   gradient arrives, its gradients (times ``1/world_size``) are packed into one flat
   tensor and all-reduced on a communication thread — *while backward goes on*;
4. **wait at the end of backward**: the last hook waits for every bucket and copies the
   averages back into ``.grad``; the optimizer then steps on identical numbers everywhere.

The broadcast and the all-reduces are the book's (``collectives.py``: a tree broadcast, the
ring). With 2 ranks every element's sum is one addition, so neither the bucket layout nor
the ring's chunks can change the bits: this equals
``torch.nn.parallel.DistributedDataParallel`` exactly. From 3 ranks on it equals the ring's
own order of summation on its buckets exactly, and torch DDP up to rounding.

Test: ``pytest tests/test_textbook_dp_ddp.py -k ddp``
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch
from torch import nn

from minidp.comm import group as groups
from minidp.textbook.collectives import broadcast, ring_all_reduce


def make_buckets(params: list[nn.Parameter], cap_bytes: int) -> list[list[nn.Parameter]]:
    """Group ``params`` last-to-first; close a bucket once it holds ``>= cap_bytes``."""
    buckets, current, size = [], [], 0
    for p in reversed(params):  # backward computes the last layer's gradients first
        current.append(p)
        size += p.numel() * p.element_size()
        if size >= cap_bytes:
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


class DistributedDataParallel(nn.Module):
    """The textbook DDP: ``ddp(x)``, ``loss.backward()``, ``optimizer.step()`` as usual.

    Wrap a model once: the hooks stay on its parameters (the faithful one removes them
    when the wrapper is dropped).
    """

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0, group=None) -> None:
        super().__init__()
        params = [p for p in module.parameters() if p.requires_grad]
        if bucket_cap_mb <= 0 or not params or len({p.dtype for p in params}) > 1:
            raise ValueError(
                f"textbook DDP: expected bucket_cap_mb > 0 and trainable parameters of one "
                f"dtype, got bucket_cap_mb={bucket_cap_mb}, {len(params)} trainable "
                f"parameter(s) of dtypes {sorted({str(p.dtype) for p in params})} — "
                f"minidp.DistributedDataParallel buckets each dtype separately"
            )
        self.module = module
        self.group = groups.resolve(group)
        self.world_size = self.group.size()
        for t in [*module.parameters(), *module.buffers()]:  # 1. same start everywhere
            broadcast(t.data, 0, self.group)
        self.buckets = make_buckets(params, int(bucket_cap_mb * 2**20))  # 2. buckets
        self.bucket_of = {p: b for b, bucket in enumerate(self.buckets) for p in bucket}
        for p in params:  # 3. one hook per parameter, after its .grad is accumulated
            p.register_post_accumulate_grad_hook(self._grad_ready)
        self.comm = ThreadPoolExecutor(max_workers=1)  # all-reduces one by one, in order
        self.pending: list[int] = []  # per bucket: gradients not ready yet
        self.futures: list[Future] = []  # per launched bucket: its all-reduce

    def forward(self, *args, **kwargs):
        if any(n < len(b) for b, n in zip(self.buckets, self.pending)):
            raise RuntimeError(  # a backward began, but some gradients never arrived
                f"textbook DDP: the last backward produced no gradient for "
                f"{sum(self.pending)} parameter(s); expected every parameter to take part "
                f"in the loss — the faithful DDP has find_unused_parameters=True for this"
            )
        self.pending = [len(b) for b in self.buckets]
        self.futures = []
        return self.module(*args, **kwargs)

    def _grad_ready(self, param: nn.Parameter) -> None:
        if not self.pending:
            raise RuntimeError(
                "textbook DDP: a gradient arrived with no forward through the wrapper before "
                "it; expected ddp(x) then one backward — call the wrapper, not ddp.module"
            )
        self.pending[self.bucket_of[param]] -= 1
        # Launch full buckets strictly in index order: every rank must run the same
        # all-reduces in the same order, even if its gradients arrive in another.
        while len(self.futures) < len(self.buckets) and self.pending[len(self.futures)] == 0:
            bucket = self.buckets[len(self.futures)]
            # Scale while packing, like torch: sum(g * (1/W)), not sum(g) / W.
            flat = torch.cat([p.grad.reshape(-1) * (1.0 / self.world_size) for p in bucket])
            self.futures.append(self.comm.submit(ring_all_reduce, flat, "sum", self.group))
        if len(self.futures) == len(self.buckets):
            self._finish()  # 4. the last gradient is in: wait for all buckets

    def _finish(self) -> None:
        for bucket, future in zip(self.buckets, self.futures):
            flat = future.result()  # (bucket numel,) the average over the ranks
            offset = 0
            for p in bucket:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        self.pending = []  # this step is done; the next forward arms the hooks again


# What the engine adds (``minidp.DistributedDataParallel``, lesson 11): torch's exact bucket
# layout (one bucket for the first iteration, then *rebuilt* in the order gradients really
# became ready, a small first bucket, per-dtype buckets, rank 0's layout broadcast) and the
# engine's collectives in gloo's order, which together make it bit for bit torch's at any
# world size; ``no_sync``; ``find_unused_parameters``; buffers broadcast every forward;
# ``gradient_as_bucket_view``; comm hooks; ``join``; the hooks removed with the wrapper; and
# checks that turn a desynchronised model or a double backward into an error, not a hang.
