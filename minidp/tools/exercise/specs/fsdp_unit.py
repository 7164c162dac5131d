"""``fsdp_unit`` (lesson 21) vs torch DDP on the full module: the output and this rank's
``torch.chunk`` rows of the averaged gradient (FSDP2's layout); shards come back unchanged."""

import torch
from torch import nn

from minidp.tools.exercise.inputs import spare
from minidp.tools.exercise.spec import Exercise, Expected, Traffic
from minidp.tools.exercise.specs import ddp
from minidp.tools.exercise.specs.clip_grad_norm_shards import shard


def _module(case) -> nn.Module:
    """float64 unit: Linear 3 -> 5, Tanh, Linear 5 -> 2; the same weights on every rank."""
    g = torch.Generator().manual_seed(700 + case["seed"])
    unit = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()
    with torch.no_grad():
        for p in unit.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return unit


def _inputs(case, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(case["seed"] * 7919 + rank * 101)
    x = torch.randn(4, 3, generator=g, dtype=torch.float64)  # this rank's input
    return x, torch.randn(4, 2, generator=g, dtype=torch.float64)  # and d loss / d output


def learn(fn, case, rank, world, group):
    x, grad_out = _inputs(case, rank)
    full = _module(case)
    shards = {n: shard(p.detach(), world, rank) for n, p in full.named_parameters()}
    empty = _module(case)
    for p in empty.parameters():  # the learner must gather the weights, not read them here
        nn.init.zeros_(p)
    answer = fn(empty, dict(shards), x, grad_out, group)
    if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], dict):
        return [answer[0], *[answer[1].get(n) for n in shards], list(shards.values())]
    return answer


def expect(case, rank, world, group):
    x, grad_out = _inputs(case, rank)
    full = _module(case)
    wrapped = nn.parallel.DistributedDataParallel(full, process_group=group)  # (kept: its
    out = wrapped(x)  # reducer must outlive the backward)
    out.backward(grad_out)  # averaged over the ranks inside backward
    names = [n for n, _ in full.named_parameters()]
    given = [shard(p.detach(), world, rank) for p in _module(case).parameters()]
    return Expected([out.detach(), *[shard(p.grad, world, rank) for p in full.parameters()], given],
                    ["output", *[f"{n}'s gradient shard" for n in names],
                     "the shards you were given, after the call (unchanged)"])  # fmt: skip


def _least(case, world: int) -> list[tuple[int, None]]:
    """Every rank's rows of every parameter must reach the others: (W-1) x its floor share."""
    rows_cols = [(5, 3), (5, 1), (2, 5), (2, 1)]  # the unit's weights and biases
    return [(sum((world - 1) * (r // world) * c * 8 for r, c in rows_cols), None)] * world


EXERCISE = Exercise(
    reference="torch.nn.parallel.DistributedDataParallel's output and this rank's torch.chunk "
    "of its averaged gradients (gloo), float64, rtol 1e-12", learn=learn, expect=expect,
    # 5 rows on 3 ranks: 2, 2, 1; 2 rows: 1, 1, 0 (an empty shard); on 4: 2, 2, 1, -
    cases=({"world": 2, "seed": 0}, {"world": 3, "seed": 1}, {"world": 1, "seed": 2},
           {"world": 4, "seed": 3}, {"world": 3, "seed": 4, "spare": 1}),
    draw=lambda rng: {"world": rng.randint(1, 5), "seed": rng.randint(0, 99), **spare(rng)},
    generated=4, tolerance=lambda case: ddp.TOL, reference_processes=True, prepare=ddp.warm,
    answers=("minidp.textbook.fsdp.FSDP",),
    traffic=Traffic(_least, "the all-gather of every rank's rows"))  # fmt: skip
