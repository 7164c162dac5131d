"""counted elements, not bytes

The limits are in BYTES: a parameter takes numels[i] * dtypes[i].itemsize of them (4 per
float32 element, 8 per float64, 2 per float16), not numels[i].
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    open_buckets, limit_at, buckets = {}, {}, []
    for i in reversed(range(len(numels))):
        dtype = dtypes[i]
        indices, size = open_buckets.get(dtype, ([], 0))
        indices.append(i)
        size += numels[i]  # elements, not bytes
        at = limit_at.setdefault(dtype, 0)
        if size >= bucket_size_limits[at]:
            buckets.append(indices)
            indices, size = [], 0
            limit_at[dtype] = min(at + 1, len(bucket_size_limits) - 1)
        open_buckets[dtype] = (indices, size)
    return buckets + [ix for ix, _ in reversed(open_buckets.values()) if ix]
