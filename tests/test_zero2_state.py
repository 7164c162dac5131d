"""ZeRO-2 checkpoints across world sizes, against torch's ZeroRedundancyOptimizer.

``Zero2Optimizer.state_dict()`` (after ``consolidate_state_dict``) is torch's whole-tensor
format, so one checkpoint loads at any world size — and into torch's own ZeRO:

* saved at 2 ranks: ``torch.equal`` to torch's consolidated state after the same steps;
  loaded back at 2 ranks it continues bit for bit like the run that never stopped;
* saved at 3 ranks, loaded at 2: minidp and torch's ZeRO both load that one checkpoint
  and stay ``torch.equal`` (the 2-rank rule);
* saved at 2 ranks, loaded at 3: within ``ULPS_AT_3_4`` of torch (the 3-rank rule,
  ``test_zero2.py``).

Run: ``pytest tests/test_zero2_state.py``
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from test_zero2 import ULPS_AT_3_4
from test_zero2_runners import resume, save

from minidp.launch import run_threads
from minidp.zero import Zero2Optimizer


@pytest.fixture(scope="module")
def saved(process_world):
    return {w: process_world(w).run(save) for w in (2, 3)}


def test_state_dict_is_torchs_consolidated_state(saved):
    r = saved[2][0]
    assert r["before"] == [0.0, 0.0]
    assert r["state_vs_torch"] == {"keys": [], "max": 0.0}, r["state_vs_torch"]
    assert sorted(r["sd"]["state"]) == [0, 1, 2, 3, 4, 5, 6]  # 7 is the frozen projection
    r3 = saved[3][0]  # the checkpoint the 3 -> 2 test loads: torch's within the 3-rank rule
    assert max(r3["before"]) <= ULPS_AT_3_4
    assert r3["state_vs_torch"]["max"] <= ULPS_AT_3_4, r3["state_vs_torch"]


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_resume_same_world_continues_like_the_run_that_never_stopped(saved, process_world):
    r0 = saved[2][0]
    out = process_world(2).run(resume, r0["sd"], r0["weights"], 2)
    for rank, r in enumerate(out):
        assert r["diffs"] == [0.0, 0.0], f"rank {rank}: {r['diffs']}"
        assert _same(r["weights"], saved[2][rank]["uninterrupted"])


def test_resume_3_to_2_ranks_matches_torch_bit_for_bit(saved, process_world):
    r0 = saved[3][0]
    for rank, r in enumerate(process_world(2).run(resume, r0["sd"], r0["weights"], 2)):
        assert r["diffs"] == [0.0, 0.0], f"rank {rank}: {r['diffs']}"


def test_resume_2_to_3_ranks_matches_torch(saved, process_world):
    r0 = saved[2][0]
    for rank, r in enumerate(process_world(3).run(resume, r0["sd"], r0["weights"], 2)):
        assert max(r["diffs"]) <= ULPS_AT_3_4, f"rank {rank}: {r['diffs']}"


def _wrong_groups(rank, world):
    opt = Zero2Optimizer(nn.Linear(3, 2).parameters(), torch.optim.SGD, lr=0.1)
    opt.load_state_dict({"state": {}, "param_groups": [{"params": [0, 1, 2]}]})


def test_load_state_dict_of_another_model_is_a_clear_error():
    from minidp.launch import WorkerError

    with pytest.raises(WorkerError, match=r"groups of \[2\] parameters, got \[3\].*any world"):
        run_threads(_wrong_groups, 2, timeout=30)


def _no_consolidate(rank, world):
    opt = Zero2Optimizer(nn.Linear(3, 2).parameters(), torch.optim.SGD, lr=0.1)
    opt.state_dict()


def test_state_dict_without_consolidate_is_a_clear_error():
    from minidp.launch import WorkerError

    with pytest.raises(WorkerError, match=r"expected consolidate_state_dict\(to=0\)"):
        run_threads(_no_consolidate, 2, timeout=30)
