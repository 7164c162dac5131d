"""no small first bucket

Each dtype's FIRST bucket is held to bucket_size_limits[0] (DDP's 1 MiB), the next to
bucket_size_limits[1], and so on — the last limit repeats.
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    cap = bucket_size_limits[-1]
    open_buckets, buckets = {}, []
    for i in reversed(range(len(numels))):
        indices, size = open_buckets.get(dtypes[i], ([], 0))
        indices.append(i)
        size += numels[i] * dtypes[i].itemsize
        if size >= cap:
            buckets.append(indices)
            indices, size = [], 0
        open_buckets[dtypes[i]] = (indices, size)
    return buckets + [indices for indices, _ in reversed(open_buckets.values()) if indices]
