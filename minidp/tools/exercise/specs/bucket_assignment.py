"""``bucket_assignment``: the buckets DDP rebuilds, vs torch's assignment called as the
rebuild calls it (last parameter first, positions as ``tensor_indices``), on meta tensors."""

import torch
import torch.distributed as dist

from minidp.tools.exercise.spec import Exercise

F32, F64, F16 = "float32", "float64", "float16"


def torch_buckets(numels: list[int], dtypes: list[str], limits: list[int]) -> list[list[int]]:
    """torch's assignment as DDP's rebuild calls it, mapped back to registration indices."""
    walk = [torch.empty(numels[i], dtype=getattr(torch, dtypes[i]), device="meta")
            for i in reversed(range(len(numels)))]  # fmt: skip
    n = len(walk)
    buckets = dist._compute_bucket_assignment_by_size(walk, limits, [False] * n, list(range(n)))
    return [[n - 1 - j for j in bucket] for bucket in buckets[0]]


def learn(fn, case, rank, world, group):
    dtypes = [getattr(torch, d) for d in case["dtypes"]]
    return fn(list(case["numels"]), dtypes, list(case["limits"]))  # (tuples arrive as lists)


def expect(case, rank, world, group):
    return torch_buckets(case["numels"], case["dtypes"], case["limits"])


def draw(rng):
    k, n = rng.randint(1, 7), rng.randint(1, 3)
    limits = [rng.choice((8, 16, 24, 40, 64, 100)) for _ in range(n)]
    case = {"world": rng.randint(1, 3), "numels": [rng.randint(1, 40) for _ in range(k)]}
    return {**case, "dtypes": [rng.choice((F32, F64, F16)) for _ in range(k)], "limits": limits}


CASES = tuple({"world": w, "numels": n, "dtypes": d, "limits": lim} for w, n, d, lim in (
    # bytes last to first: 8, 20 | 16, 24 — closes at 28 >= 24, then reaches 40 exactly
    (1, [6, 4, 5, 2], [F32] * 4, [24, 40]),
    (2, [4, 6, 2, 4], [F32] * 4, [24, 40]),  # 16 + 8 = 24: the limit exactly (>=, not >)
    (3, [3, 3, 2, 5, 3, 2], [F32, F64] * 3, [16, 40]),  # each dtype its own small first bucket
    (2, [10, 3, 3, 3], [F32] * 4, [12, 40]),  # the first limit matters
    (3, [5, 7, 1, 8, 9], [F16] * 5, [16]),  # one limit (a user's bucket_cap_mb)
    # float32 closes and re-opens while float64 stays open: still open at the end, they come
    # float64 then float32 (the order they first appeared, last first)
    (1, [1, 1, 4], [F32, F64, F32], [16]),
    (2, [2, 3, 1, 6, 5], [F32, F16, F64, F32, F16], [12]),
    (1, [2] * 6, [F32] * 6, [8, 24]),  # a third bucket: the last limit repeats
    (1, [2_000_000, 2048, 262_144, 4_000_000, 512, 1_048_576], [F32] * 6, [2**20, 25 * 2**20]),
))  # fmt: skip
EXERCISE = Exercise(
    reference="torch.distributed._compute_bucket_assignment_by_size as DDP's rebuild calls it "
    "(with tensor_indices), the same buckets in the same order", learn=learn, expect=expect,
    cases=CASES, draw=draw, generated=24,  # cheap cases; mixed dtypes need many to meet
    answers=("torch.distributed._compute_bucket_assignment_by_size", "minidp.ddp.buckets",
             "minidp.textbook.ddp"))  # fmt: skip
