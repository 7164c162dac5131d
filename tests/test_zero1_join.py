"""ZeRO-1 under torch's ``Join`` (uneven inputs), against torch's ZeroRedundancyOptimizer.

Rank r gets ``counts[r]`` batches. In one rank process the same seeded model trains
twice under ``torch.distributed.algorithms.Join([ddp, optimizer])``: torch DDP + torch's
``ZeroRedundancyOptimizer``, then torch DDP + minidp's. Ranks that run out shadow the
others' iterations through the join hooks — DDP's all-reduces, then the optimizer's
step and broadcasts. After each of the rank's own steps and after the context exits,
every parameter must be ``torch.equal``.

DDP is torch's on both sides: ``Join`` takes ``Joinable`` objects, and minidp's DDP has a
join of its own (``ddp.join()``, ``tests/test_ddp_join.py``) instead.

Run: ``pytest tests/test_zero1_join.py``
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from test_zero_support import TinyLM, batch, diffs, loss_of
from torch.distributed.algorithms.join import Join, Joinable
from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

import minidp

CASES = {
    # name: (batches per rank (cycled), optimizer, its options, ZeRO constructor options)
    "adamw": ((3, 5, 2), torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}, {}),
    "sgd_rank0_no_batches": ((0, 3, 2), torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, {}),
    "adamw_bucket_view": (
        (4, 1, 3),
        torch.optim.AdamW,
        {"lr": 1e-2},
        {"parameters_as_bucket_view": True},
    ),
}


def _train(rank: int, zero_class, name: str) -> list[nn.Module]:
    counts, cls, options, zero_options = CASES[name]
    torch.manual_seed(rank)  # ranks start different: DDP broadcasts rank 0's weights
    ddp = nn.parallel.DistributedDataParallel(TinyLM())
    opt = zero_class(ddp.parameters(), cls, **zero_options, **options)
    snaps = []
    with Join([ddp, opt]):
        for step in range(counts[rank % len(counts)]):
            x, y = batch(rank, step)
            opt.zero_grad()
            loss_of(ddp, x, y).backward()
            opt.step()
            snaps.append(copy.deepcopy(ddp.module))
    snaps.append(copy.deepcopy(ddp.module))  # after the joined ranks' shadow steps
    return snaps


def run_join(rank: int, world: int, names: list[str]) -> dict:
    out = {}
    for name in names:
        ref = _train(rank, TorchZero, name)
        ours = _train(rank, minidp.ZeroRedundancyOptimizer, name)
        out[name] = {
            "steps": (len(ref), len(ours)),
            "diffs": [(i, d) for i, (a, b) in enumerate(zip(ours, ref)) for d in diffs(a, b)],
        }
    return out


@pytest.fixture(scope="module")
def joined(process_world):
    cache: dict[int, list[dict]] = {}

    def get(world_size: int) -> list[dict]:
        if world_size not in cache:
            cache[world_size] = process_world(world_size).run(run_join, list(CASES))
        return cache[world_size]

    return get


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("world_size", [2, 3])
def test_join_with_uneven_inputs_matches_torch(joined, world_size, case):
    for rank, results in enumerate(joined(world_size)):
        r = results[case]
        assert r["steps"][0] == r["steps"][1]
        assert r["diffs"] == [], f"rank {rank}: (snapshot, (param, max|diff|)) {r['diffs'][:6]}"


def test_is_a_torch_joinable():
    assert issubclass(minidp.ZeroRedundancyOptimizer, Joinable)
