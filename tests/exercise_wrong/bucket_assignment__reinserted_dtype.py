"""Wrong on purpose (interleaved dtypes): the open buckets are kept in a list ordered by when
each was (re)opened, so a dtype that closes and opens again moves behind the others."""


def bucket_assignment(numels, dtypes, bucket_size_limits):
    open_order, contents, sizes, closes, done = [], {}, {}, {}, []
    for i in range(len(numels) - 1, -1, -1):
        d = dtypes[i]
        if d not in contents:
            open_order.append(d)
            contents[d], sizes[d] = [], 0
        contents[d].append(i)
        sizes[d] += numels[i] * d.itemsize
        limit = bucket_size_limits[min(closes.get(d, 0), len(bucket_size_limits) - 1)]
        if sizes[d] >= limit:
            done.append(contents.pop(d))
            open_order.remove(d)
            closes[d] = closes.get(d, 0) + 1
    return done + [contents[d] for d in reversed(open_order)]
