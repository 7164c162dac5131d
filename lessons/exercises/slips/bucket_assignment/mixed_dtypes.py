"""dtypes mixed in one bucket

A bucket is one flat tensor, so it holds one dtype: keep an open bucket PER dtype (a dict
dtype -> bucket) and close each on its own.
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    buckets, indices, size, at = [], [], 0, 0
    for i in reversed(range(len(numels))):
        indices.append(i)
        size += numels[i] * dtypes[i].itemsize
        if size >= bucket_size_limits[at]:
            buckets.append(indices)
            indices, size = [], 0
            at = min(at + 1, len(bucket_size_limits) - 1)
    return buckets + ([indices] if indices else [])
