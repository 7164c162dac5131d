"""sorted by first parameter

The right buckets, sorted by their first parameter in the walk — but DDP keeps its rebuilt
buckets in the order they CLOSE (torch sorts only when called without tensor_indices), with
the still-open ones after them.
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    open_buckets, limit_at, buckets = {}, {}, []
    walk = list(reversed(range(len(numels))))
    for i in walk:
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
    buckets += [ix for ix, _ in open_buckets.values() if ix]
    position = {i: n for n, i in enumerate(walk)}
    return sorted(buckets, key=lambda b: position[b[0]])
