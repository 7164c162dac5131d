"""open buckets dropped

The buckets still open when the walk ends are buckets too (their gradients must be
all-reduced as well): after every closed bucket, add each dtype's open one.
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    open_buckets, limit_at, buckets = {}, {}, []
    for i in reversed(range(len(numels))):
        dtype = dtypes[i]
        indices, size = open_buckets.get(dtype, ([], 0))
        indices.append(i)
        size += numels[i] * dtype.itemsize
        at = limit_at.setdefault(dtype, 0)
        if size >= bucket_size_limits[at]:
            buckets.append(indices)
            indices, size = [], 0
            limit_at[dtype] = min(at + 1, len(bucket_size_limits) - 1)
        open_buckets[dtype] = (indices, size)
    return buckets
