"""``DistributedDataParallel`` from hooks and buckets, checked bit for bit against torch's.

* :class:`DistributedDataParallel` (``distributed.py``): the wrapper.
* ``reducer.py``: gradient hooks, bucket launches during backward, the final wait.
* ``buckets.py``: :func:`compute_bucket_assignment_by_size` and the flat buffers.
* ``hooks.py``: comm hooks (``allreduce_hook``, ``fp16_compress_hook``).
* ``sampler.py``: :class:`DistributedSampler`.
* ``join.py``: ``ddp.join()``, uneven inputs across ranks (torch's ``Join``).
* ``simple.py``: :func:`allreduce_gradients`, DDP in ten lines (no overlap), to compare.

Watch one step: ``python -m minidp demo ddp``; measure: ``python -m minidp bench ddp``;
test: ``pytest tests/test_ddp*.py tests/test_buckets.py tests/test_sampler.py``
"""

from minidp.ddp.buckets import compute_bucket_assignment_by_size
from minidp.ddp.distributed import DistributedDataParallel
from minidp.ddp.hooks import GradBucket, allreduce_hook, fp16_compress_hook
from minidp.ddp.join import Join
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
