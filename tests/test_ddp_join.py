"""``ddp.join()`` for uneven inputs, against torch's ``DistributedDataParallel.join()``.

Rank r gets ``counts[r]`` batches. Inside one rank process the same seeded model trains
through torch's DDP under ``torch_ddp.join()`` and through minidp's under
``minidp_ddp.join()``; after each of the rank's own steps, and after the context exits
(the last rank to join broadcasts its model), every parameter and buffer must be
``torch.equal``. With ``throw_on_early_termination=True`` both raise, with the same
message, on every rank. ``no_sync``: each step accumulates one micro-batch locally first
(the joined ranks shadow only the synchronized backward), at 2 and 3 ranks.

Run: ``pytest tests/test_ddp_join.py``
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_ddp_support import MLP, ConvBN, _conv_data, _diffs, _mlp_data
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as torch_hooks

import minidp
from minidp.ddp import hooks as minidp_hooks

CASES = {
    # name: (model, data, counts per rank (cycled), DDP kwargs, join kwargs, options)
    "mlp": (MLP, _mlp_data, (3, 5, 4, 2), {}, {}, {}),
    "buffers_from_active_rank": (ConvBN, _conv_data, (2, 4, 3, 1), {}, {}, {}),
    "divide_by_active_ranks": (MLP, _mlp_data, (2, 4, 3, 1), {}, {"divide": False}, {}),
    "early_join_before_rebuild": (MLP, _mlp_data, (1, 3, 4, 2), {"bucket_cap_mb": 0.001}, {}, {}),
    "no_batches_at_all": (MLP, _mlp_data, (0, 2, 3, 1), {"bucket_cap_mb": 0.001}, {}, {}),
    "with_hook": (MLP, _mlp_data, (3, 1, 2, 4), {"bucket_cap_mb": 0.001}, {}, {"hook": True}),
    # each step: a no_sync() micro-batch, then a synchronized one; joined ranks skip the first
    "no_sync": (ConvBN, _conv_data, (2, 4, 3, 1), {"bucket_cap_mb": 0.001}, {}, {"micro": True}),
}


def _train(rank, ddp, module, batches, join_kwargs, micro=False) -> tuple[list, str | None]:
    """Train under join; snapshots after each step and at the end; the error text if any."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    snaps, error = [], None
    kw = {
        "divide_by_initial_world_size": join_kwargs.get("divide", True),
        "throw_on_early_termination": join_kwargs.get("throw", False),
    }
    try:
        with ddp.join(**kw):
            for x, y in batches:
                opt.zero_grad()
                if micro:  # half the batch accumulated locally, the other half synchronized
                    with ddp.no_sync():
                        F.mse_loss(ddp(x[::2]), y[::2]).backward()
                    x, y = x[1::2], y[1::2]
                F.mse_loss(ddp(x), y).backward()
                opt.step()
                snaps.append(copy.deepcopy(module))
    except RuntimeError as exc:
        error = str(exc)
    snaps.append(copy.deepcopy(module))
    return snaps, error


def run_join(rank: int, world: int, name: str, join_override: dict | None = None) -> dict:
    cls, data, counts, kwargs, join_kwargs, opts = CASES[name]
    join_kwargs = join_override or join_kwargs
    torch.manual_seed(99)
    model = cls()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * rank)
    g = torch.Generator().manual_seed(500 + rank)
    batches = [data(g) for _ in range(counts[rank % len(counts)])]
    m_ref, m_mine = copy.deepcopy(model), copy.deepcopy(model)
    ref = nn.parallel.DistributedDataParallel(m_ref, **kwargs)
    mine = minidp.DistributedDataParallel(m_mine, **kwargs)
    if opts.get("hook"):
        ref.register_comm_hook(None, torch_hooks.allreduce_hook)
        mine.register_comm_hook(None, minidp_hooks.allreduce_hook)
    micro = opts.get("micro", False)
    ref_snaps, ref_err = _train(rank, ref, m_ref, batches, join_kwargs, micro)
    mine_snaps, mine_err = _train(rank, mine, m_mine, batches, join_kwargs, micro)
    diffs = [d for i, (a, b) in enumerate(zip(ref_snaps, mine_snaps)) for d in _diffs(i, a, b)]
    return {
        "diffs": diffs[:10],
        "steps": (len(ref_snaps), len(mine_snaps)),
        "errors": (ref_err, mine_err),
    }


def run_cases(rank: int, world: int, names: list[str], join_override=None) -> dict:
    return {name: run_join(rank, world, name, join_override) for name in names}


@pytest.fixture(scope="module")
def joined(process_world):
    cache = {}

    def get(world_size):
        if world_size not in cache:
            cache[world_size] = process_world(world_size).run(run_cases, list(CASES))
        return cache[world_size]

    return get


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("world_size", [2, 3])
def test_join_matches_torch(joined, world_size, case):
    for rank, results in enumerate(joined(world_size)):
        r = results[case]
        assert r["errors"] == (None, None)
        assert r["steps"][0] == r["steps"][1]
        assert r["diffs"] == [], f"rank {rank}: (snapshot, tensor, what, |diff|) {r['diffs']}"


def test_throw_on_early_termination_raises_everywhere_like_torch(process_world):
    results = process_world(3).run(run_cases, ["mlp"], {"throw": True})
    for res in results:
        ref_err, mine_err = res["mlp"]["errors"]
        assert ref_err is not None and mine_err == ref_err
        assert res["mlp"]["diffs"] == []
    # counts 3, 5, 4: rank 0 runs out first and says so; the others learn it from rank 0
    assert results[0]["mlp"]["errors"][1] == "Rank 0 exhausted all inputs."
    assert "Detected at least one rank that exhausted inputs" in results[1]["mlp"]["errors"][1]
