"""``clip_grad_norm_shards`` (lesson 32) vs ``clip_grad_norm_`` on the full gradients (in the
judge): its norm and this rank's rows of what it clipped; scales 1e-3..1e3, negative zeros."""

import math

import torch
from torch.nn.utils import clip_grad_norm_

from minidp.tools.exercise.inputs import spare
from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs.comm import least_all_reduce

INF = math.inf


def full_grads(case) -> list[torch.Tensor]:
    g, out = torch.Generator().manual_seed(case["seed"] * 977 + 13), []
    for i, s in enumerate(case["shapes"]):
        t = torch.randn(s, generator=g, dtype=torch.float64) * (1e-3, 1.0, 1e3)[i % 3]
        t.view(-1)[::7] = -0.0
        out.append(t.to(getattr(torch, case.get("dtype", "float64"))))
    return out


def shard(t: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s ``torch.chunk`` rows of ``t`` (empty when the chunks run out)."""
    chunks = t.chunk(world)
    return chunks[rank].clone() if rank < len(chunks) else t.new_empty((0, *t.shape[1:]))


def learn(fn, case, rank, world, group):
    mine = [shard(t, world, rank) for t in full_grads(case)]
    return [fn(mine, case["max_norm"], case["norm_type"], group), *mine]


def expect(case, rank, world, group):
    params = [torch.zeros_like(t, requires_grad=True) for t in full_grads(case)]
    for p, t in zip(params, full_grads(case)):
        p.grad = t
    norm = float(clip_grad_norm_(params, case["max_norm"], norm_type=case["norm_type"]))
    labels = ["total norm"] + [f"shard of gradient {i}" for i in range(len(params))]
    return Expected([norm] + [shard(p.grad, world, rank) for p in params], labels)


def draw(rng):  # rows >= 1: torch's inf-norm of an empty gradient raises (a shard may be empty)
    shapes = [(rng.randint(1, 7),) if rng.random() < 0.5 else (rng.randint(1, 6), rng.randint(1, 3))
              for _ in range(rng.randint(1, 3))]  # fmt: skip
    return {"world": rng.randint(1, 5), "shapes": tuple(shapes), "seed": rng.randint(0, 99),
            "max_norm": rng.choice((0.25, 1.0, 100.0)), "norm_type": rng.choice((2.0, INF)),
            "dtype": rng.choice(("float64", "float32")), **spare(rng)}  # fmt: skip


CASES = tuple({"world": w, "shapes": s, "max_norm": m, "norm_type": n, "seed": i, **more}
              for i, (w, s, m, n, more) in enumerate((
    (1, ((3, 2), (4,)), 1.0, 2.0, {}), (2, ((4, 3), (3,)), 1.0, 2.0, {}),
    (2, ((2, 2),), 100.0, 2.0, {}), (3, ((5, 2), (2,), (1, 3)), 0.5, 2.0, {}),
    (2, ((3, 2), (5,)), 0.5, INF, {}), (4, ((6, 2), (3,)), 1.0, INF, {}),
    (3, ((4, 4),), 2.0, 2.0, {"dtype": "float32"}), (5, ((7,), (3, 2)), 50.0, INF, {}),
    (2, ((3,), (2, 2)), 1.0, 2.0, {"spare": 1}))))  # fmt: skip
EXERCISE = Exercise(
    reference="torch.nn.utils.clip_grad_norm_ on the full gradients (its norm, this rank's "
    "torch.chunk rows of what it clipped); float64 rtol 1e-12, float32 rtol 1e-5",
    learn=learn, expect=expect, cases=CASES, draw=draw,
    tolerance=lambda case: (1e-5, 1e-6) if case.get("dtype") == "float32" else (1e-12, 1e-15),
    traffic=Traffic(least_all_reduce(1, 4), "an all-reduce of one partial norm (float32 at least)"),
)  # fmt: skip
