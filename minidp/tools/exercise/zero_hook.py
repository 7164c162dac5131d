"""Exercise on ZeRO-2 (lesson 20): the reduce-scatter gradient hook.

``reduce_scatter_grad(param, group)`` is the body of a post-accumulate-grad hook: when
``param``'s local gradient is ready, every rank keeps only *its piece* of the gradient
averaged over the ranks (``param.grad_shard``) and frees the full gradient (``param.grad =
None``) — ZeRO-2's memory saving, and half of DDP's all-reduce (the other half, the
all-gather, moves the updated parameters after the step).

Layout: the flat gradient padded with zeros to a multiple of the world size W, cut into W
equal pieces of ``ceil(numel / W)`` elements; rank r keeps piece r.

Reference: gloo's own ``all_reduce`` (SUM) of each full gradient, divided by W, padded and
sliced — the sums a reduce-scatter computes, on every torch (gloo has reduce_scatter only
from ~2.8), on the judge's thread ranks. Weights and inputs are ``±m·2^e`` in float64
(``inputs.dyadic``, e in -2..1: fractions, both signs, negative zero), so every gradient
is exact and any summation order gives the same sums; dividing before or after summing
rounds differently, hence ``rtol=1e-12`` rather than ``torch.equal``.

Test: ``pytest tests/test_exercises.py -k reduce_scatter_grad``
"""

from __future__ import annotations

import torch
from torch import nn

from minidp.tools.exercise import reference
from minidp.tools.exercise.inputs import dyadic, world_and_seed
from minidp.tools.exercise.spec import (
    Answer,
    Exercise,
    Expected,
    Mistake,
    Result,
    Traffic,
    everywhere,
    same,
)

# worlds 1..5; the model's parameters have 24, 6, 18, 3, 3 and 1 elements: some fewer than W
CASES = tuple({"world": w, "seed": s} for w, s in ((1, 0), (2, 0), (3, 1), (4, 2), (5, 3)))


EXPONENTS = (-2, 1)  # weights and inputs m*2^e: products and their sums stay exact


def _model(seed: int) -> nn.Sequential:
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 3), nn.Linear(3, 1)).double()
    with torch.no_grad():  # exact weights: every gradient is exact
        for p in model.parameters():
            p.copy_(dyadic(p.shape, torch.float64, g, EXPONENTS))
    return model


def _batch(case, rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(case["seed"] * 101 + rank)
    return dyadic((3, 4), torch.float64, g, EXPONENTS)  # this rank's own batch


def _piece(full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Piece ``rank`` of ``full`` flattened and zero-padded to a multiple of ``world``."""
    flat = full.reshape(-1)
    k = -(-flat.numel() // world)  # ceil
    padded = torch.cat([flat, flat.new_zeros(k * world - flat.numel())])  # (world * k,)
    return padded[rank * k : (rank + 1) * k].clone()


def _learn(fn, case, rank, world, group) -> Answer:
    mine = _model(case["seed"])
    for p in mine.parameters():
        p.register_post_accumulate_grad_hook(lambda p: fn(p, group))
    mine(_batch(case, rank)).sum().backward()
    got = [getattr(p, "grad_shard", None) for p in mine.parameters()]
    freed = all(p.grad is None for p in mine.parameters())
    return Answer(got + [torch.tensor(freed)])  # the last item: was every full gradient freed?


def _expect(case, rank, world, group) -> Expected:
    ref = _model(case["seed"])
    ref(_batch(case, rank)).sum().backward()
    expected, pieces = [], []
    for p in ref.parameters():
        avg = reference.all_reduce(p.grad.clone(), group) / world  # gloo SUM, then / W
        expected.append(_piece(avg, rank, world))
        pieces.append([_piece(avg, r, world) for r in range(world)])
    return Expected(expected + [torch.tensor(True)], {"pieces": pieces})


def _least(case, world: int) -> list[tuple[int, None]]:
    """A reduce-scatter of every gradient: W-1 pieces of floor(numel/W) at least."""
    numels = (24, 6, 18, 3, 3, 1)
    return [(sum((world - 1) * (n // world) * 8 for n in numels), None)] * world


def _shards(r: Result) -> tuple[list, list]:
    return r.got[:-1], r.expected[:-1]


def _not_divided(case, results, factor: float | None = None) -> bool:
    """Every piece is ``factor`` (default: world) times the reference."""
    w = case["world"]
    factor = w if factor is None else factor
    return w > 1 and everywhere(
        results,
        lambda rank, r: all(
            isinstance(g, torch.Tensor) and torch.allclose(g, e * factor, rtol=1e-12, atol=0)
            for g, e in zip(*_shards(r))
        ),
    )


def _other_piece(case, results) -> bool:
    """Every rank holds right numbers, but another rank's piece of them."""
    return case["world"] > 1 and everywhere(
        results,
        lambda rank, r: any(
            all(same(g, ps[other]) for g, ps in zip(r.got[:-1], r.extra["pieces"]))
            for other in range(case["world"])
            if other != rank
        ),
    )


def _not_freed(case, results) -> bool:
    return everywhere(
        results,
        lambda rank, r: same(r.got[:-1], r.expected[:-1]) and not bool(r.got[-1]),
    )


REDUCE_SCATTER_GRAD = Exercise(
    name="reduce_scatter_grad",
    lesson="20_zero2",
    summary="ZeRO-2's gradient hook: keep your piece of the averaged gradient, free the rest",
    reference="gloo all_reduce (SUM) / W of each gradient, padded, sliced; float64, rtol 1e-12",
    learn=_learn,
    expect=_expect,
    answers=("minidp.textbook.zero.TextbookZero2", "minidp.zero.zero2_hooks"),
    traffic=Traffic(bounds=_least, formula="a reduce-scatter of every gradient"),
    cases=CASES,
    strategy=lambda: world_and_seed(1, 5),
    tolerance=lambda case: (1e-12, 0.0),
    mistakes=(
        Mistake(
            "forgot to divide by the world size",
            "every piece is world_size times the reference: reduce-scatter SUMS — divide your "
            "piece by group.size() (the gradient is an average, as in DDP).",
            _not_divided,
        ),
        Mistake(
            "divided twice",
            "every piece is the reference divided by world_size once more: divide by "
            "group.size() ONCE — before the reduce-scatter or after it, not both.",
            lambda case, results: _not_divided(case, results, 1 / case["world"]),
        ),
        Mistake(
            "kept another rank's piece",
            "the numbers are right but they are another rank's piece: rank r keeps piece r "
            "of the padded flat gradient (input_list[r] of the reduce-scatter).",
            _other_piece,
        ),
        Mistake(
            "did not free the full gradient",
            "the pieces are right, but param.grad still holds the full gradient: set "
            "param.grad = None — freeing it is ZeRO-2's whole memory saving.",
            _not_freed,
        ),
    ),
)
