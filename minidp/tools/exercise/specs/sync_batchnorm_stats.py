"""``sync_batchnorm_stats`` (lesson 24) vs ``torch.var_mean(torch.cat(every x), correction=0)``
and ``F.batch_norm`` on the full batch; ``x`` unchanged; rtol 1e-9."""

import torch
import torch.nn.functional as F

from minidp.tools.exercise.inputs import spare
from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs.comm import least_all_reduce

EPS = 1e-5  # BatchNorm's default eps


def rows(case, rank: int) -> torch.Tensor:
    """``(N_r, C)`` float64 rows with a mean and a spread of this rank's own."""
    g, c = torch.Generator().manual_seed(case["seed"] * 1009 + rank * 31 + 7), case["channels"]
    offset = torch.randn(c, generator=g, dtype=torch.float64) * 2
    scale = 0.5 + torch.rand(c, generator=g)
    return torch.randn(case["sizes"][rank], c, generator=g, dtype=torch.float64) * scale + offset


def learn(fn, case, rank, world, group):
    answer = fn(x := rows(case, rank), group)
    try:
        mean, var = answer
        return [mean, var, (rows(case, rank) - mean) * (var + EPS).rsqrt(), x]
    except Exception:  # not a (mean, var) pair: compared as it is
        return answer


def expect(case, rank, world, group):
    full = torch.cat([rows(case, r) for r in range(world)])  # (N, C): every rank's rows
    var, mean = torch.var_mean(full, dim=0, correction=0)
    start, n = sum(case["sizes"][:rank]), case["sizes"][rank]
    mine = F.batch_norm(full, None, None, training=True, eps=EPS)[start : start + n]
    return Expected([mean, var, mine, rows(case, rank)], ["mean", "var", "your rows normalised "
                    "with your mean and var", "your x after the call (unchanged)"])  # fmt: skip


def draw(rng):
    sizes = [rng.randint(1, 6) for _ in range(rng.randint(1, 5))]
    sizes[-1] += sum(sizes) < 2  # BatchNorm refuses a single row per channel
    return {"world": len(sizes), "sizes": tuple(sizes), "channels": rng.randint(1, 4),
            "seed": rng.randint(0, 99), **spare(rng)}  # fmt: skip


CASES = tuple({"world": len(s), "sizes": s, "channels": c, "seed": i, **more}
              for i, (s, c, more) in enumerate((
    ((4,), 3, {}), ((3, 3), 2, {}), ((5, 2), 3, {}), ((1, 6, 3), 4, {}), ((2, 2, 7, 1), 1, {}),
    ((3, 1, 4, 1, 5), 2, {}), ((4, 1, 2), 2, {"spare": 1}))))  # fmt: skip
EXERCISE = Exercise(
    reference="torch.var_mean(torch.cat(every rank's x), dim=0, correction=0) and "
    "torch.nn.functional.batch_norm (training) on the full batch, float64, rtol 1e-9",
    learn=learn, expect=expect, cases=CASES, draw=draw, tolerance=lambda case: (1e-9, 1e-12),
    answers=("minidp.nn.sync_batchnorm.SyncBatchNorm",),
    traffic=Traffic(least_all_reduce(lambda case: 2 * case["channels"] + 1),
                    "an all-reduce of [Σx, Σx², n] per channel (float64)"))  # fmt: skip
