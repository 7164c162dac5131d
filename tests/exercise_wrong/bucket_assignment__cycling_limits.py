"""Wrong on purpose: each dtype cycles through the limits instead of repeating the last."""

import itertools


def bucket_assignment(numels, dtypes, bucket_size_limits):
    limits, open_buckets, done = {}, {}, []
    for i in reversed(range(len(numels))):
        d = dtypes[i]
        if d not in open_buckets:
            open_buckets[d] = [[], 0, None]
            limits[d] = itertools.cycle(bucket_size_limits)
        bucket = open_buckets[d]
        if bucket[2] is None:
            bucket[2] = next(limits[d])
        bucket[0].append(i)
        bucket[1] += numels[i] * d.itemsize
        if bucket[1] >= bucket[2]:
            done.append(bucket[0])
            open_buckets[d] = [[], 0, None]
    return done + [b[0] for b in reversed(list(open_buckets.values())) if b[0]]
