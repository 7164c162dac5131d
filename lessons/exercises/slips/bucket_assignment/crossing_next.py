"""the crossing parameter started the next bucket

You closed a bucket BEFORE the parameter that would take it over the limit, and started the
next bucket with it: torch adds the parameter first and closes the bucket once it holds >=
the limit — the parameter that crosses stays in.
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    open_buckets, limit_at, buckets = {}, {}, []
    for i in reversed(range(len(numels))):
        dtype = dtypes[i]
        indices, size = open_buckets.get(dtype, ([], 0))
        nbytes = numels[i] * dtype.itemsize
        at = limit_at.setdefault(dtype, 0)
        if indices and size + nbytes > bucket_size_limits[at]:  # would cross: close first
            buckets.append(indices)
            indices, size = [], 0
            limit_at[dtype] = min(at + 1, len(bucket_size_limits) - 1)
        open_buckets[dtype] = (indices + [i], size + nbytes)
    return buckets + [ix for ix, _ in reversed(open_buckets.values()) if ix]
