"""minidp's DistributedDataParallel against torch's, bit for bit, in real gloo processes.

For world sizes 2, 3 and 4, every scenario of ``test_ddp_support.SCENARIOS`` trains the
same seeded model (ranks start from different weights, and see different data) for five
SGD-with-momentum steps through ``torch.nn.parallel.DistributedDataParallel`` and through
``minidp.DistributedDataParallel``, inside the same rank process. After every step every
parameter, buffer and gradient must be ``torch.equal`` (gradients: also the same
None-ness), and the final bucket layout (after torch's rebuild) must be the same.

Why world size 3 and 4 matter: with 2 ranks every element is one addition, so any
summation order gives the same bits; from 3 ranks on, gloo's chunk-by-chunk association
decides the rounding, and only the exact bucket layouts reproduce it.

The fp16 hook is bit-exact too: gloo adds float16 values one addition at a time, each
rounded to float16, exactly as ``torch.add`` on float16 tensors does, in the same order.

Run: ``pytest tests/test_ddp.py``
"""

from __future__ import annotations

import pytest
from test_ddp_support import SCENARIOS, run_scenarios

WORLD_SIZES = (2, 3, 4)


@pytest.fixture(scope="module")
def parity(process_world):
    """All scenarios for one world size in ONE ``world.run`` (a few seconds each)."""
    cache: dict[int, list[dict]] = {}

    def get(world_size: int) -> list[dict]:
        if world_size not in cache:
            cache[world_size] = process_world(world_size).run(run_scenarios, list(SCENARIOS))
        return cache[world_size]

    return get


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_bit_identical_to_torch_ddp(parity, world_size, scenario):
    exact_up_to = SCENARIOS[scenario][3].get("exact_up_to", max(WORLD_SIZES))
    for rank, results in enumerate(parity(world_size)):
        diffs = results[scenario]["diffs"]
        if world_size > exact_up_to:  # another summation order: only rounding may differ
            assert all(d[2] in ("value", "grad") and d[3] < 1e-5 for d in diffs), diffs
            continue
        assert diffs == [], (
            f"rank {rank}: minidp differs from torch DDP (step, tensor, what, max |diff|): {diffs}"
        )


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_same_buckets_as_torch_reducer(parity, world_size, scenario):
    results = parity(world_size)[0][scenario]
    assert results["minidp_buckets"] == results["torch_buckets"]


def test_scenarios_cover_several_buckets(parity):
    """The small-cap scenarios really produce 3+ buckets (after the rebuild)."""
    results = parity(2)[0]
    assert len(results["many_buckets"]["minidp_buckets"]) >= 3
    assert len(results["grad_as_view_kept"]["minidp_buckets"]) >= 3
    assert len(results["fp16_hook"]["minidp_buckets"]) >= 3


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_allreduce_gradients_after_backward_matches_torch_first_step(parity, world_size):
    for results in parity(world_size):
        assert results["allreduce_gradients"] == []
