"""ZeRO-1 under torch's ``Join`` (uneven inputs), against torch's ZeroRedundancyOptimizer.

Rank r gets ``counts[r]`` batches. In one rank process the same seeded model trains
under ``torch.distributed.algorithms.Join([ddp, optimizer])``: torch DDP + torch's
``ZeroRedundancyOptimizer`` (the reference), then every pair with minidp's DDP, minidp's
ZeRO or both. Ranks that run out shadow the others' iterations through the join hooks —
DDP's all-reduces, then the optimizer's step and broadcasts. After each of the rank's own
steps and after the context exits, every parameter must be ``torch.equal``.

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


# Which DDP and ZeRO train under one ``Join``: torch's pair is the reference, every other
# pair (minidp's on either side or both) must give its bits.
PAIRS = {
    "torch DDP + minidp ZeRO": (nn.parallel.DistributedDataParallel, "minidp"),
    "minidp DDP + minidp ZeRO": (minidp.DistributedDataParallel, "minidp"),
    "minidp DDP + torch ZeRO": (minidp.DistributedDataParallel, "torch"),
}
ZEROS = {"torch": TorchZero, "minidp": minidp.ZeroRedundancyOptimizer}


def _train(rank: int, ddp_class, zero_class, name: str) -> list[nn.Module]:
    counts, cls, options, zero_options = CASES[name]
    torch.manual_seed(rank)  # ranks start different: DDP broadcasts rank 0's weights
    ddp = ddp_class(TinyLM())
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
        ref = _train(rank, nn.parallel.DistributedDataParallel, TorchZero, name)
        for pair, (ddp_class, zero) in PAIRS.items():
            ours = _train(rank, ddp_class, ZEROS[zero], name)
            out[name, pair] = {
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


@pytest.mark.parametrize("pair", list(PAIRS))
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("world_size", [2, 3])
def test_join_with_uneven_inputs_matches_torch(joined, world_size, case, pair):
    for rank, results in enumerate(joined(world_size)):
        r = results[case, pair]
        assert r["steps"][0] == r["steps"][1]
        assert r["diffs"] == [], f"rank {rank}: (snapshot, (param, max|diff|)) {r['diffs'][:6]}"


def test_is_a_torch_joinable():
    assert issubclass(minidp.ZeroRedundancyOptimizer, Joinable)
    assert issubclass(minidp.DistributedDataParallel, Joinable)
