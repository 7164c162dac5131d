"""Exercise (lesson 11): DDP's bucket assignment — which gradients travel together.

Task: ``numels[i]`` and ``dtypes[i]`` describe ``list(model.parameters())[i]``. Return the
buckets DDP builds when it *rebuilds* them after the first backward, as lists of
parameter indices, in DDP's order — what torch's
``torch.distributed._compute_bucket_assignment_by_size`` returns when DDP's rebuild calls
it with the parameters LAST to first (the order their gradients become ready in a plain
stack of layers) and their positions in that walk:

1. walk ``i`` from the last parameter to the first;
2. a bucket is one flat tensor, so there is one open bucket PER dtype: add parameter
   ``i`` (``numels[i] * dtypes[i].itemsize`` bytes) to its dtype's open bucket;
3. close that bucket as soon as it holds at least the current limit (``>=``: the
   parameter that crosses the limit stays in). Each dtype has its own place in
   ``bucket_size_limits``: its first bucket is held to ``bucket_size_limits[0]`` (DDP's
   small first bucket, so the first all-reduce starts early), its next one to
   ``bucket_size_limits[1]``, and so on; the last limit repeats;
4. the buckets come in the order they CLOSE; the buckets still open at the end come
   after them — the dtype that first appeared LAST in the walk first (torch keeps the open
   buckets in a hash map, and that is the order it gives them back on torch 2.13-2.15).
   Inside a bucket keep the walk order.

Example: float32 parameters of 6, 4, 5, 2 elements (24, 16, 20, 8 bytes), limits
[24, 40] -> [[3, 2], [1, 0]] (8 + 20 = 28 >= 24 closes the first bucket; 16 + 24 = 40
reaches the next limit). With two dtypes the order matters: float32/float64 parameters of
3, 3, 2, 5, 3, 2 elements alternating (f32, f64, f32, ...), limits [16, 40] ->
[[5], [3], [4, 2], [0], [1]] — [3] closes before [4, 2] does, though 4 came first.

Tools: plain Python; ``dtype.itemsize`` is the bytes per element.

Hints:
* ``reversed(range(len(numels)))`` walks last to first.
* A dict from dtype to [indices, bytes] keeps one open bucket per dtype (a dict
  remembers the order its keys were added in); a second dict from dtype to its position
  in ``bucket_size_limits``.
* Append a bucket to the answer at the moment it closes.

Check: ``python -m minidp exercise check bucket_assignment``
"""

import torch


def bucket_assignment(
    numels: list[int], dtypes: list[torch.dtype], bucket_size_limits: list[int]
) -> list[list[int]]:
    """DDP's buckets of parameter indices: last parameter first, one dtype per bucket."""
    raise NotImplementedError("not implemented yet: walk last to first, close at >= limit")
