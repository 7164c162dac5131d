"""``minidp.comm.collectives.all_gather_into_tensor`` against gloo's all-gather (thread worlds).

Run: ``pytest tests/test_all_gather_into_tensor.py``

ZeRO-2's step gathers every rank's updated rows into one flat tensor whose own slot it
filled in place (no list of outputs, no buffer of the collective's own). Here: the result
is ``torch.equal`` to gloo's all-gather of the same inputs, concatenated, with the input a
separate tensor or this rank's slice of the output; a wrong output is refused clearly.
"""

from __future__ import annotations

import pytest
import torch
from helpers import rank_input

from minidp.comm import group as groups
from minidp.comm.collectives import all_gather_into_tensor
from minidp.launch import WorkerError, run_threads


def _vs_gloo(rank: int, world: int, numel: int, dtype) -> list:
    x = rank_input(rank, numel, dtype, 5)
    separate = all_gather_into_tensor(torch.empty(world * numel, dtype=dtype), x.clone())
    aliased = torch.full((world * numel,), -7).to(dtype)
    aliased[rank * numel : (rank + 1) * numel] = x  # the input is this rank's slot
    all_gather_into_tensor(aliased, aliased[rank * numel : (rank + 1) * numel])
    theirs = [torch.empty_like(x) for _ in range(world)]
    groups.resolve().allgather([theirs], [x.clone()]).wait()
    return [separate, aliased, torch.cat(theirs)]


@pytest.mark.parametrize("world, numel", [(2, 1), (2, 1000), (3, 37), (4, 4096)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_all_gather_into_tensor_equals_gloo(world, numel, dtype):
    for separate, aliased, theirs in run_threads(_vs_gloo, world, numel, dtype):
        assert torch.equal(separate, theirs) and torch.equal(aliased, theirs)


def _wrong_output(rank: int, world: int) -> None:
    all_gather_into_tensor(torch.empty(3), torch.ones(2))


def test_a_wrong_output_is_refused_on_every_rank():
    with pytest.raises(
        WorkerError,
        match=r"all_gather_into_tensor: expected a contiguous torch.float32 output of 2 x 2 "
        r"elements, got \(3,\)",
    ) as info:
        run_threads(_wrong_output, 2, timeout=20)
    assert len(info.value.failures) == 2
