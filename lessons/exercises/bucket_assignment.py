"""Exercise (lesson 11): DDP's bucket assignment — which gradients travel together.

Task: ``numels[i]`` and ``dtypes[i]`` describe ``list(model.parameters())[i]``. Return the
buckets DDP builds, as lists of parameter indices, exactly as torch's
``torch.distributed._compute_bucket_assignment_by_size`` does when it is given the
parameters LAST to first (the order their gradients become ready in a plain stack of
layers — DDP rebuilds its buckets in the order it saw):

1. walk ``i`` from the last parameter to the first;
2. a bucket is one flat tensor, so there is one open bucket PER dtype: add parameter
   ``i`` (``numels[i] * dtypes[i].itemsize`` bytes) to its dtype's open bucket;
3. close that bucket as soon as it holds at least the current limit (``>=``: the
   parameter that crosses the limit stays in). Each dtype has its own place in
   ``bucket_size_limits``: its first bucket is held to ``bucket_size_limits[0]`` (DDP's
   small 1 MiB first bucket, so the first all-reduce starts early), its next one to
   ``bucket_size_limits[1]``, and so on; the last limit repeats;
4. buckets still open at the end are buckets too. Order the buckets by the position of
   their first parameter in the walk; inside a bucket keep the walk order.

Example: float32 parameters of 6, 4, 5, 2 elements (24, 16, 20, 8 bytes), limits
[24, 40] -> [[3, 2], [1, 0]] (8 + 20 = 28 >= 24 closes the first bucket; 16 + 24 = 40
reaches the next limit).

Tools: plain Python; ``dtype.itemsize`` is the bytes per element.

Hints:
* ``reversed(range(len(numels)))`` walks last to first.
* A dict from dtype to [indices, bytes] keeps one open bucket per dtype; a second dict
  from dtype to its position in ``bucket_size_limits``.
* Remember for every bucket where its first parameter came in the walk, to sort by it.

Check: ``python -m minidp exercise check bucket_assignment``
"""

import torch


def bucket_assignment(
    numels: list[int], dtypes: list[torch.dtype], bucket_size_limits: list[int]
) -> list[list[int]]:
    """DDP's buckets of parameter indices: last parameter first, one dtype per bucket."""
    raise NotImplementedError("not implemented yet: walk last to first, close at >= limit")
