"""``reduce_scatter_grad`` (lesson 20): ZeRO-2's hook vs all_reduce / W of each gradient,
padded and sliced; exact gradients (``±m·2^e``), rtol 1e-12 for where one divides."""

import torch
from torch import nn

from minidp.tools.exercise import reference
from minidp.tools.exercise.inputs import dyadic, spare
from minidp.tools.exercise.spec import Exercise, Expected, Traffic

NUMELS = (24, 6, 18, 3, 3, 1)  # the model's parameters: some have fewer elements than W
_exact = lambda shape, seed: dyadic(shape, torch.float64, torch.Generator().manual_seed(seed),
                                    (-2, 1))  # fmt: skip


def _model(case) -> nn.Sequential:
    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 3), nn.Linear(3, 1)).double()
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(_exact(p.shape, case["seed"] * 7 + i))
    return model


def learn(fn, case, rank, world, group):
    mine = _model(case)
    for p in mine.parameters():
        p.register_post_accumulate_grad_hook(lambda p: fn(p, group))
    mine(_exact((3, 4), case["seed"] * 101 + rank)).sum().backward()
    got = [getattr(p, "grad_shard", None) for p in mine.parameters()]
    return [*got, [p.grad is None for p in mine.parameters()]]


def expect(case, rank, world, group):
    ref = _model(case)
    ref(_exact((3, 4), case["seed"] * 101 + rank)).sum().backward()
    pieces = []
    for p in ref.parameters():
        flat = reference.all_reduce(p.grad.clone(), group).reshape(-1) / world
        k = -(-flat.numel() // world)
        padded = torch.cat([flat, flat.new_zeros(k * world - flat.numel())])
        pieces.append(padded[rank * k : (rank + 1) * k])
    labels = [f"{n}'s grad_shard" for n, _ in ref.named_parameters()]
    return Expected([*pieces, [True] * len(pieces)], [*labels, "param.grad freed (None)"])


def _least(case, world: int) -> list[tuple[int, None]]:
    """A reduce-scatter of every gradient: W-1 pieces of floor(numel/W) at least."""
    return [(sum((world - 1) * (n // world) * 8 for n in NUMELS), None)] * world


CASES = tuple({"world": w, "seed": s, **m} for w, s, m in (
    (1, 0, {}), (2, 0, {}), (3, 1, {}), (4, 2, {}), (5, 3, {}), (3, 4, {"spare": 1})))  # fmt: skip
EXERCISE = Exercise(
    reference="gloo all_reduce (SUM) / W of each gradient, padded, sliced; float64, rtol 1e-12",
    learn=learn, expect=expect, cases=CASES,
    draw=lambda rng: {"world": rng.randint(1, 5), "seed": rng.randint(0, 99), **spare(rng)},
    generated=4, tolerance=lambda case: (1e-12, 0.0),
    answers=("minidp.textbook.zero.TextbookZero2", "minidp.zero.zero2_hooks"),
    traffic=Traffic(_least, "a reduce-scatter of every gradient"))  # fmt: skip
