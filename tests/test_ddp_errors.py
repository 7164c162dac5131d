"""Bad inputs give clear errors (expected vs got, a hint), on every rank, and never a hang.

Local mistakes are caught before any communication, so they need no world at all.
Cross-rank mistakes run in thread worlds (real gloo groups, milliseconds to start): each
rank must raise the same error, naming the rank and the parameter, instead of waiting in
a collective for a peer that already gave up.

Run: ``pytest tests/test_ddp_errors.py``
"""

from __future__ import annotations

import gc
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_ddp_support import MLP, Branchy

import minidp
from minidp.ddp import hooks
from minidp.launch import WorkerError, run_threads

DDP = minidp.DistributedDataParallel


def _rank_errors(fn, world_size: int, *args) -> WorkerError:
    with pytest.raises(WorkerError) as info:
        run_threads(fn, world_size, *args, timeout=30)
    return info.value


# ---- local mistakes: raised before any communication -------------------------------------


def test_no_parameter_requires_grad():
    model = nn.Linear(4, 4).requires_grad_(False)
    with pytest.raises(RuntimeError, match=r"no parameter that requires a gradient.*2 param"):
        DDP(model)


def test_parameters_on_mixed_devices():
    model = nn.Module()
    model.a = nn.Parameter(torch.zeros(3))
    model.b = nn.Parameter(torch.zeros(3, device="meta"))
    with pytest.raises(ValueError, match=r"one device, got parameters on 2 devices.*'b' on meta"):
        DDP(model)


def test_sparse_gradients_are_refused():
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 2))
    with pytest.raises(ValueError, match=r"'0' makes sparse gradients .* expected dense"):
        DDP(model)


def test_bad_bucket_cap_and_algorithm():
    with pytest.raises(ValueError, match=r"bucket_cap_mb must be a positive number.*got -1"):
        DDP(nn.Linear(2, 2), bucket_cap_mb=-1)
    with pytest.raises(
        ValueError, match=r"algorithm must be one of \('auto', 'ring', 'naive'\).*'tree'"
    ):
        DDP(nn.Linear(2, 2), algorithm="tree")


def _wrap_twice(rank, world):
    inner = nn.Sequential(nn.Linear(2, 2))
    ddp = DDP(inner)
    for again in (ddp, inner, nn.Sequential(ddp)):
        with pytest.raises(ValueError, match=r"already wrapped in a DistributedDataParallel"):
            DDP(again)
    torch_ddp = nn.parallel.DistributedDataParallel.__new__(nn.parallel.DistributedDataParallel)
    nn.Module.__init__(torch_ddp)
    with pytest.raises(ValueError, match=r"already wrapped"):
        DDP(torch_ddp)
    del ddp, again, torch_ddp
    gc.collect()  # pytest.raises' tracebacks held the old wrapper in a cycle
    return DDP(inner) is not None  # the old wrapper is gone: wrapping again is fine


def test_module_already_wrapped():
    assert run_threads(_wrap_twice, 1) == [True]


# ---- cross-rank mistakes: every rank raises the same error ------------------------------


def _build(rank, world, variant):
    torch.manual_seed(0)
    if variant == "count":
        model = MLP((16, 32, 4)) if rank == 0 else MLP((16, 32, 32, 4))
        DDP(model)
    elif variant == "shape":
        model = MLP((16, 32, 4)) if rank != 1 else MLP((16, 33, 4))
        DDP(model)
    elif variant == "buckets":
        DDP(MLP((16, 64, 64, 4)), find_unused_parameters=True, bucket_cap_mb=0.01 * (1 + rank))


def test_models_with_different_parameter_counts():
    err = _rank_errors(_build, 2, "count")
    assert {f.rank for f in err.failures} == {0, 1}  # both ranks raise: nobody hangs
    for f in err.failures:
        assert f.exc_type == "RuntimeError"
        assert "rank 1 has 6 parameters that require grad while rank 0 has 4" in f.message


def test_models_with_different_shapes_name_rank_and_parameter():
    err = _rank_errors(_build, 3, "shape")
    assert {f.rank for f in err.failures} == {0, 1, 2}
    assert "parameter 0 ('layers.0.weight' on rank" in str(err)
    assert "has shape (33, 16) float32 on rank 1 and (32, 16) float32 on rank 0" in str(err)


def test_different_bucket_layouts():
    err = _rank_errors(_build, 2, "buckets")
    assert {f.rank for f in err.failures} == {0, 1}
    assert "expected the same buckets on every rank, but rank 1 has" in str(err)
    assert "same bucket_cap_mb" in str(err)


def _unused_without_flag(rank, world):
    torch.manual_seed(0)
    model = Branchy()
    model.use_branch = False  # branch and `never` get no gradient, on every rank
    ddp = DDP(model)
    x = torch.randn(4, 16)
    F.mse_loss(ddp(x), torch.zeros(4, 4)).backward()
    ddp(x)  # the NEXT forward notices the unfinished reduction


def test_unused_parameters_without_find_unused_name_them():
    err = _rank_errors(_unused_without_flag, 2)
    assert {f.rank for f in err.failures} == {0, 1}
    text = str(err)
    assert "Expected to have finished reduction in the prior iteration" in text
    assert "find_unused_parameters=True" in text
    assert "Parameter indices which did not receive grad for rank" in text and ": 2 3 4 5" in text
    assert "branch.weight, branch.bias, never.weight, never.bias" in text


def _hook_misuse(rank, world, what):
    torch.manual_seed(0)
    ddp = DDP(MLP())
    if what == "twice":
        ddp.register_comm_hook(None, hooks.allreduce_hook)
        ddp.register_comm_hook(None, hooks.allreduce_hook)
    elif what == "not callable":
        ddp.register_comm_hook(None, "allreduce")
    elif what == "wrong size":

        def bad(state, bucket):
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer()[:3])
            return fut

        ddp.register_comm_hook(None, bad)
        ddp(torch.randn(2, 16)).sum().backward()


@pytest.mark.parametrize(
    "what, exc, message",
    [
        ("twice", "RuntimeError", "already registered — expected at most one"),
        ("not callable", "TypeError", "hook must be callable, got 'allreduce'"),
        (
            "wrong size",
            "TypeError",
            "must hold one tensor of 1732 elements .* got a tensor of 3 elements",
        ),
    ],
)
def test_comm_hook_misuse(what, exc, message):
    err = _rank_errors(_hook_misuse, 2, what)
    assert err.exc_type == exc
    assert re.search(message, str(err))
