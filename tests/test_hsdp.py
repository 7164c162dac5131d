"""HSDP — ``minidp.fully_shard(mesh=<2-D mesh>)`` — against FSDP2's, in real processes.

The mesh is (replicate, shard), torch's layout: at 4 ranks ``[[0, 1], [2, 3]]``, so ranks 0
and 1 shard the model between them and ranks 2 and 3 hold the same shards. Each backward
reduce-scatters the gradients within the row, then all-reduces the shard down the column
(FSDP2's order: the averages divide by the row's size, then by the column's; fp16 divides
by the whole data-parallel size, before and after the sums). Both are trained side by side
on each rank's own data; after every step every full parameter, shard and shard gradient
is ``torch.equal`` to FSDP2's (at 2 x 2 every element is one addition per collective, so
bit-exactness is the honest claim).

Run: ``pytest tests/test_hsdp.py``
"""

from __future__ import annotations

import pytest
import torch
from helpers import FSDP2_UNUSABLE
from hsdp_runners import hsdp_vs_fsdp2

import minidp
from minidp.launch import WorkerError, run_threads

needs_fsdp2 = pytest.mark.skipif(bool(FSDP2_UNUSABLE), reason=FSDP2_UNUSABLE or "")

CASES = {  # name: (param/reduce dtypes, moves)
    "fp32": (None, ()),
    "bf16": (torch.bfloat16, ()),
    "bf16_reduce_fp32": ((torch.bfloat16, torch.float32), ()),
    "fp16": ((torch.float16, torch.float16), ()),
    "fp32_no_sync_clip": (None, ("no_sync_accumulate", "clip")),
    "bf16_no_sync_clip": (torch.bfloat16, ("no_sync_accumulate", "clip")),
}


SLOW = {"bf16_reduce_fp32", "fp32_no_sync_clip"}  # the default run keeps one of each kind


@pytest.fixture(scope="module")
def at_2x2(process_world):
    done: dict[str, list] = {}

    def get(name: str) -> list[dict]:
        if name not in done:
            done[name] = process_world(4).run(hsdp_vs_fsdp2, (2, 2), *CASES[name])
        return done[name]

    return get


@needs_fsdp2
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in CASES]
)
def test_hsdp_2x2_is_bit_identical_to_fsdp2(at_2x2, name):
    for rank, r in enumerate(at_2x2(name)):
        diffs = [row for row in r["rows"] if row[3] != 0.0]
        assert r["rows"] and diffs == [], f"rank {rank}: (step, param, what, |diff|): {diffs[:5]}"
        if "clip" in CASES[name][1]:  # the same global norm as FSDP2, and it really clipped
            assert all(a == b and a > 0.5 for a, b in r["norms"]), r["norms"]


@needs_fsdp2
@pytest.mark.parametrize("shape", [(4, 1), (1, 4)], ids=["replicate_only", "shard_only"])
def test_other_shapes_at_four_ranks_are_bit_identical_to_fsdp2(process_world, shape):
    """4 x 1: every rank holds everything and the all-reduce does all the work (DDP's
    layout); 1 x 4: FSDP's. At 4 ranks the sums have 3 additions each: minidp's collectives
    add in gloo's order, so the bits are still FSDP2's."""
    for rank, r in enumerate(process_world(4).run(hsdp_vs_fsdp2, shape, None)):
        diffs = [row for row in r["rows"] if row[3] != 0.0]
        assert r["rows"] and diffs == [], f"rank {rank}: (step, param, what, |diff|): {diffs[:5]}"


@needs_fsdp2
def test_mesh_rows_shard_and_columns_replicate(at_2x2):
    for rank, r in enumerate(at_2x2("fp32")):
        row, col = rank // 2, rank % 2
        assert r["groups"] == {"shard": [2 * row, 2 * row + 1], "replicate": [col, col + 2]}


def _mesh_in_threads(rank, world):
    minidp.init_device_mesh("cpu", (1, 2))


def test_mesh_needs_torch_distributed():
    with pytest.raises(WorkerError, match=r"init_device_mesh: expected torch.distributed"):
        run_threads(_mesh_in_threads, 2, timeout=30)
