"""Wrong on purpose: every bucket gets the big cap; the small first bucket is forgotten."""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    cap = bucket_size_limits[-1]
    open_buckets, buckets = {}, []
    walk = list(reversed(range(len(numels))))
    for i in walk:
        indices, size = open_buckets.get(dtypes[i], ([], 0))
        indices.append(i)
        size += numels[i] * dtypes[i].itemsize
        if size >= cap:
            buckets.append(indices)
            indices, size = [], 0
        open_buckets[dtypes[i]] = (indices, size)
    buckets += [indices for indices, _ in open_buckets.values() if indices]
    position = {i: n for n, i in enumerate(walk)}
    return sorted(buckets, key=lambda bucket: position[bucket[0]])
