"""ZeRO-1: minidp's ZeroRedundancyOptimizer against torch's, bit for bit, in real gloo processes.

For 2, 3 and 4 ranks, with AdamW and with SGD + momentum, a small transformer-like model
(embedding tied to the output head, a frozen projection) trains four steps through torch
DDP + ``torch.distributed.optim.ZeroRedundancyOptimizer`` and through minidp DDP +
``minidp.ZeroRedundancyOptimizer`` in the same rank process, on the same data. After
every step every parameter must be ``torch.equal``; each rank must own the same
parameters as torch's; the consolidated state dict on rank 0 must equal torch's; and a
fresh minidp optimizer that loads torch's state dict must stay equal for two more steps.

torch's ZeRO and DDP only use gloo's broadcast and all-reduce, which every supported
torch has, so these comparisons run on torch 2.4 too.

Run: ``pytest tests/test_zero.py``
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from test_zero_support import OPTIMIZERS, zero1_parity

import minidp
from minidp.launch import WorkerError, run_threads
from minidp.zero.partition import partition_parameters

WORLD_SIZES = (2, 3, 4)


@pytest.fixture(scope="module")
def parity(process_world):
    cache: dict[int, list[dict]] = {}

    def get(world_size: int) -> list[dict]:
        if world_size not in cache:
            cache[world_size] = process_world(world_size).run(zero1_parity, list(OPTIMIZERS))
        return cache[world_size]

    return get


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_zero1_bit_identical_to_torch_zero(parity, world_size, optimizer):
    for rank, result in enumerate(parity(world_size)):
        r = result[optimizer]
        assert all(d == [] for d in r["per_step"]), (
            f"rank {rank}: (param, max|diff|) {r['per_step']}"
        )
        assert r["owned"] == r["torch_owned"], f"rank {rank} owns other parameters than torch's"
        assert all(d == [] for d in r["resumed"]), f"rank {rank} after load: {r['resumed']}"
    state = parity(world_size)[0][optimizer]
    assert state["state"] == [], state["state"]
    assert (
        state["n_state"] == 7
    )  # trainable: emb (= head), norm, fc1, fc2 weights and biases; not proj


def test_partition_rule_matches_torch_on_awkward_sizes():
    """Ties, equal sizes, several groups: the same owners as torch's sorted-greedy rule."""
    sizes = [[5, 7, 7, 1, 12, 3], [7, 2, 2, 9]]
    groups = [{"params": [torch.zeros(n) for n in g], "lr": 0.1} for g in sizes]
    got = partition_parameters(groups, 3)
    # Worked by hand from torch's rule: sort each group by size (stable), give each to the
    # lightest rank so far; totals carry across groups.
    owners = [[id(p) for g in rank_groups for p in g["params"]] for rank_groups in got]
    flat = [p for g in groups for p in g["params"]]
    names = {id(p): f"g{gi}[{i}]" for gi, g in enumerate(groups) for i, p in enumerate(g["params"])}
    assert [[names[i] for i in o] for o in owners] == [
        ["g0[4]", "g1[0]"],  # 12, then 7 when totals are [12, 12, 20]
        ["g0[1]", "g0[0]", "g1[1]", "g1[2]"],  # 7, 5 (tie 12/12/7 -> lowest), 2, 2
        ["g0[2]", "g0[5]", "g0[3]", "g1[3]"],  # 7 (tie -> rank 2), 3, 1, then 9 first
    ]
    assert sum(len(o) for o in owners) == len(flat)
    assert all(g["lr"] == 0.1 for rank_groups in got for g in rank_groups)


# ---- bad input -----------------------------------------------------------------------------


def test_unsupported_optimizers_are_refused():
    params = nn.Linear(2, 2).parameters()
    with pytest.raises(ValueError, match=r"expected an optimizer whose step .* got LBFGS"):
        minidp.ZeroRedundancyOptimizer(params, torch.optim.LBFGS, lr=1)
    with pytest.raises(TypeError, match=r"Optimizer subclass .* got an instance of SGD"):
        minidp.ZeroRedundancyOptimizer(
            params, torch.optim.SGD([torch.zeros(1, requires_grad=True)])
        )


def _rank_errors(fn, world_size: int) -> WorkerError:
    with pytest.raises(WorkerError) as info:
        run_threads(fn, world_size, timeout=30)
    return info.value


def _different_shapes(rank, world):
    model = nn.Sequential(nn.Linear(4, 3 + (rank == 1)), nn.Linear(3 + (rank == 1), 2))
    minidp.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)


def _different_counts(rank, world):
    model = nn.Linear(4, 3, bias=rank == 0)
    minidp.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)


def test_ranks_with_different_parameters_all_raise():
    err = _rank_errors(_different_shapes, 2)
    assert {f.rank for f in err.failures} == {0, 1}  # every rank raises: nobody hangs
    assert all("parameter 0 is shape (4, 4)" in f.message for f in err.failures)
    err = _rank_errors(_different_counts, 2)
    assert all(
        "rank 1 passes 1 parameters in 1 groups while rank 0 passes 2" in f.message
        for f in err.failures
    )


def _sparse(rank, world):
    model = nn.Embedding(10, 4, sparse=True)
    opt = minidp.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    model(torch.tensor([1, 2])).sum().backward()
    opt.step()


def _changed_outside(rank, world):
    model = nn.Linear(4, 3)
    opt = minidp.ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    opt.param_groups[0]["params"].append(nn.Parameter(torch.zeros(2)))
    opt.step()


def _state_dict_unconsolidated(rank, world):
    opt = minidp.ZeroRedundancyOptimizer(nn.Linear(4, 3).parameters(), torch.optim.SGD, lr=0.1)
    opt.state_dict()


@pytest.mark.parametrize(
    "fn, kind, pattern",
    [
        (
            _sparse,
            "ValueError",
            r"expected dense gradients, got a torch.sparse_coo gradient.*sparse=False",
        ),
        (_changed_outside, "RuntimeError", r"changed outside the optimizer.*add_param_group"),
        (
            _state_dict_unconsolidated,
            "RuntimeError",
            r"consolidate_state_dict\(to=\d\) on every rank",
        ),
    ],
)
def test_bad_use_is_a_clear_error(fn, kind, pattern):
    err = _rank_errors(fn, 2)
    assert err.exc_type == kind
    with pytest.raises(WorkerError, match=pattern):
        raise err
