"""walked first to last

Walk the parameters LAST to first (reversed(range(len(numels)))): the last layer's gradients
are ready first, so they fill the first, small bucket.
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    open_buckets, limit_at, buckets = {}, {}, []
    for i in range(len(numels)):
        indices, size = open_buckets.get(dtypes[i], ([], 0))
        indices.append(i)
        size += numels[i] * dtypes[i].itemsize
        at = limit_at.setdefault(dtypes[i], 0)
        if size >= bucket_size_limits[at]:
            buckets.append(indices)
            indices, size = [], 0
            limit_at[dtypes[i]] = min(at + 1, len(bucket_size_limits) - 1)
        open_buckets[dtypes[i]] = (indices, size)
    return buckets + [indices for indices, _ in reversed(open_buckets.values()) if indices]
