"""ZeRO-2 (bucketed, reduce-scatter in backward) and the textbook ZeRO-1/ZeRO-2, against torch.

The reference is torch's ``ZeroRedundancyOptimizer`` + torch DDP on gloo — available on
every torch minidp supports (FSDP2 needs gloo's reduce-scatter, torch >= 2.8). Why that
reference is fair for a ZeRO-2 that cuts parameters by rows: SGD, Adam and AdamW are
element-wise, so stepping rows of a tensor gives the same bits as stepping the tensor.

* 2 ranks: ``torch.equal`` after every step (``a/2 + b/2`` has a single rounding, whatever
  the order the ring adds in).
* 3 and 4 ranks: minidp's reduce-scatter adds the three or four gradients in a different
  order than gloo's all-reduce, so a gradient element may differ in its last bit; Adam
  then moves a parameter by at most ``lr``, so the parameters (of size ~1) agree to a few
  float32 ulps: ``|diff| <= 5e-7`` after four steps (measured: 1.2e-7).

The tiny bucket cap gives three buckets, so the bucket hand-off is exercised.

Run: ``pytest tests/test_zero2.py``
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from helpers import FSDP2_UNUSABLE
from test_zero_support import OPTIMIZERS, zero2_parity, zero2_vs_fsdp2

from minidp.launch import WorkerError, run_threads
from minidp.zero import Zero2Optimizer

WORLD_SIZES = (2, 3, 4)
ULPS_AT_3_4 = 5e-7


@pytest.fixture(scope="module")
def parity(process_world):
    cache: dict[int, list[dict]] = {}

    def get(world_size: int) -> list[dict]:
        if world_size not in cache:
            cache[world_size] = process_world(world_size).run(zero2_parity, list(OPTIMIZERS))
        return cache[world_size]

    return get


@pytest.mark.parametrize("variant", ["zero2", "textbook1", "textbook2"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_matches_torch_zero_with_ddp(parity, world_size, optimizer, variant):
    for rank, result in enumerate(parity(world_size)):
        per_step = result[optimizer][variant]
        assert len(per_step) == 4
        if world_size == 2:
            assert per_step == [0.0] * 4, f"rank {rank}: max |diff| per step {per_step}"
        else:
            assert max(per_step) <= ULPS_AT_3_4, f"rank {rank}: max |diff| per step {per_step}"
    assert parity(world_size)[0][optimizer]["buckets"] == 3


@pytest.mark.skipif(FSDP2_UNUSABLE is not None, reason=FSDP2_UNUSABLE or "")
def test_matches_fsdp2_without_reshard(process_world):
    """FSDP2 with reshard_after_forward=False is torch's ZeRO-2-like mode; at 2 ranks the
    full parameters are torch.equal after every step and each rank's rows are FSDP2's
    local shard (``to_local()``), bit for bit."""
    for rank, r in enumerate(process_world(2).run(zero2_vs_fsdp2)):
        assert r["full"] == [0.0] * 3, f"rank {rank}: max |diff| per step {r['full']}"
        assert all(r["local"]), f"rank {rank}: shards equal per step {r['local']}"


# ---- bad input ------------------------------------------------------------------------------


def _rank_error(fn) -> WorkerError:
    with pytest.raises(WorkerError) as info:
        run_threads(fn, 2, timeout=30)
    return info.value


def _unused_parameter(rank, world):
    model = nn.ModuleDict({"used": nn.Linear(3, 3), "unused": nn.Linear(3, 3)})
    opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    model["used"](torch.ones(2, 3)).sum().backward()
    opt.step()


def _sparse(rank, world):
    model = nn.Embedding(10, 4, sparse=True)
    opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)  # noqa: F841 (kept alive)
    model(torch.tensor([1, 2])).sum().backward()


def _replaced_outside(rank, world):
    model = nn.Linear(3, 2)
    opt = Zero2Optimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    model.weight.data = torch.zeros(2, 3)  # new storage: the shard views are stale
    model(torch.ones(1, 3)).sum().backward()
    opt.step()


def _different_models(rank, world):
    Zero2Optimizer(nn.Linear(3, 2 + rank).parameters(), torch.optim.SGD, lr=0.1)


@pytest.mark.parametrize(
    "fn, pattern",
    [
        (_unused_parameter, r"expected every trainable parameter to get a gradient.*frozen"),
        (_sparse, r"expected dense gradients, got a torch.sparse_coo gradient"),
        (_replaced_outside, r"replaced outside the optimizer \(p.data = ...\).*copy new values"),
        (_different_models, r"parameter 0 is shape \(3, 3\).* on rank 1 and shape \(2, 3\)"),
    ],
)
def test_bad_use_is_a_clear_error(fn, pattern):
    err = _rank_error(fn)
    with pytest.raises(WorkerError, match=pattern):
        raise err


def test_unsupported_optimizer():
    with pytest.raises(ValueError, match="got LBFGS"):
        Zero2Optimizer(nn.Linear(2, 2).parameters(), torch.optim.LBFGS)
