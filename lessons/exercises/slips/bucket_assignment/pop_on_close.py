"""closed buckets removed from the open ones

You delete a dtype's bucket from the dict when it closes, so when that dtype opens a new
bucket it goes to the END of the dict: the still-open buckets then come in another order
than torch's. Keep the dtype's entry and reset it to an empty bucket ([[], 0]): its place
— where the dtype FIRST appeared in the walk — is what orders the open buckets at the end.
"""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    open_buckets, steps, closed = {}, {}, []
    for i in reversed(range(len(numels))):
        bucket = open_buckets.setdefault(dtypes[i], [[], 0])
        step = steps.setdefault(dtypes[i], 0)
        limit = bucket_size_limits[min(step, len(bucket_size_limits) - 1)]
        bucket[0].append(i)
        bucket[1] += numels[i] * dtypes[i].itemsize
        if bucket[1] >= limit:
            closed.append(bucket[0])
            del open_buckets[dtypes[i]]  # the slip: a re-opened dtype moves to the end
            steps[dtypes[i]] = step + 1
    return closed + [b[0] for b in reversed(open_buckets.values()) if b[0]]
