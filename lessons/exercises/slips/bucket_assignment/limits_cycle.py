"""the limits cycle

After the last limit you went back to the first (limits[n % len(limits)]): torch's LAST limit
repeats for every further bucket of a dtype — only the first bucket is the small one.
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    open_buckets, steps, closed = {}, {}, []
    for i in reversed(range(len(numels))):
        bucket = open_buckets.setdefault(dtypes[i], [[], 0])
        step = steps.setdefault(dtypes[i], 0)
        limit = bucket_size_limits[step % len(bucket_size_limits)]  # the slip
        bucket[0].append(i)
        bucket[1] += numels[i] * dtypes[i].itemsize
        if bucket[1] >= limit:
            closed.append(bucket[0])
            open_buckets[dtypes[i]] = [[], 0]
            steps[dtypes[i]] = step + 1
    return closed + [b[0] for b in reversed(open_buckets.values()) if b[0]]
