"""``DistributedDataParallel`` from hooks and buckets, checked bit for bit against torch's.

Read ``distributed.py`` (the wrapper), ``reducer.py`` (hooks, launches, the final wait),
``buckets.py``, then ``hooks.py`` (comm hooks), ``join.py`` (uneven inputs: DDP's hook for
torch's ``Join``, re-exported here), ``sampler.py`` and ``simple.py``
(:func:`allreduce_gradients`: no overlap, to compare). The book: ``minidp/textbook/ddp.py``.

Watch one step: ``python -m minidp demo ddp``; measure: ``python -m minidp bench ddp``;
test: ``pytest tests/test_ddp*.py tests/test_buckets.py tests/test_sampler.py``
"""

# The context manager is torch's: generic over Joinables, minidp's DDP is one of them.
from torch.distributed.algorithms.join import Join

from minidp.ddp.buckets import compute_bucket_assignment_by_size
from minidp.ddp.distributed import DistributedDataParallel
from minidp.ddp.hooks import GradBucket, allreduce_hook, fp16_compress_hook
from minidp.ddp.sampler import DistributedSampler
from minidp.ddp.simple import allreduce_gradients

__all__ = [
    "DistributedDataParallel",
    "DistributedSampler",
    "GradBucket",
    "Join",
    "allreduce_gradients",
    "allreduce_hook",
    "compute_bucket_assignment_by_size",
    "fp16_compress_hook",
]
