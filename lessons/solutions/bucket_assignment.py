"""Reference solution: the buckets DDP rebuilds, torch's rule in plain Python.

Check: ``python -m minidp exercise check bucket_assignment --path lessons/solutions/bucket_assignment.py``
"""

import torch


def bucket_assignment(
    numels: list[int], dtypes: list[torch.dtype], bucket_size_limits: list[int]
) -> list[list[int]]:
    open_buckets: dict[torch.dtype, tuple[list[int], int]] = {}  # dtype -> (indices, bytes)
    limit_at: dict[torch.dtype, int] = {}  # dtype -> its position in bucket_size_limits
    buckets: list[list[int]] = []  # in the order they close
    for i in reversed(range(len(numels))):  # last parameter first
        dtype = dtypes[i]
        indices, size = open_buckets.get(dtype, ([], 0))
        indices.append(i)
        size += numels[i] * dtype.itemsize
        at = limit_at.setdefault(dtype, 0)
        if size >= bucket_size_limits[at]:  # the parameter that crosses the limit stays in
            buckets.append(indices)
            indices, size = [], 0
            limit_at[dtype] = min(at + 1, len(bucket_size_limits) - 1)  # the last repeats
        open_buckets[dtype] = (indices, size)
    # then the still-open ones: the dtype that first appeared last comes first
    return buckets + [indices for indices, _ in reversed(open_buckets.values()) if indices]
