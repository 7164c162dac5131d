"""A DDP model saved whole, copied, and asked about itself — against torch's DDP.

What torch's own ``distributed_test.py`` CPU cases do with a DDP model, here on the same
inputs with both wrappers inside each of 2 rank processes:

* ``torch.save(ddp)`` in the middle of training and ``torch.load(...,
  weights_only=False)``, then training on: every parameter ``torch.equal`` to torch's
  after every step (a loaded DDP takes the default group again and builds a fresh reducer,
  without a broadcast, as torch's); ``copy.deepcopy(ddp)`` trains on the same way. main:
  "cannot pickle 'torch._C._distributed_c10d.ProcessGroup' object".
* A DDP over a group made by ``new_group`` is refused, in torch's words, on both.
* ``_get_ddp_logging_data()``: torch's keys, and torch's values for everything but the
  clocks (sampling every 2nd iteration after the 10th: ``iteration``; the rebuilt buckets;
  the gradient-ready order); the clocks in the order torch's test checks.
* ``_set_static_graph()`` after training is refused with torch's message, which both keep
  in the logging data.

Run: ``pytest tests/test_ddp_save.py``
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from test_ddp_support import MLP, _diffs, _mlp_data

import minidp
from minidp.launch import WorkerError, run_threads

WRAPPERS = {"torch": nn.parallel.DistributedDataParallel, "minidp": minidp.DistributedDataParallel}
CLOCKS = ("time", "_start", "_end")  # fields that hold clock readings or durations


def _step(ddp, x, y, lr: float = 0.05) -> None:
    F.mse_loss(ddp(x), y).backward()
    with torch.no_grad():
        for p in ddp.parameters():
            if p.grad is not None:
                p.sub_(lr * p.grad)
                p.grad = None


def _reloaded(ddp):
    buf = io.BytesIO()
    torch.save(ddp, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)  # a whole module: not weights only


def _error(fn) -> str | None:
    try:
        fn()
    except RuntimeError as exc:
        return str(exc)
    return None


def save_and_copy(rank: int, world: int) -> dict:
    torch.manual_seed(3)
    base = MLP()
    with torch.no_grad():  # ranks start apart: the constructor's broadcast must fix it
        for p in base.parameters():
            p.add_(0.01 * rank)
    g = torch.Generator().manual_seed(40 + rank)
    batches = [_mlp_data(g) for _ in range(6)]
    out = {"diffs": []}
    for how in ("torch.save", "deepcopy"):
        models = {name: wrap(copy.deepcopy(base)) for name, wrap in WRAPPERS.items()}
        for i, (x, y) in enumerate(batches):
            for name in WRAPPERS:
                if i == 3:  # mid-training: after the bucket rebuild
                    ddp = models[name]
                    models[name] = _reloaded(ddp) if how == "torch.save" else copy.deepcopy(ddp)
                _step(models[name], x, y)
            out["diffs"] += _diffs((how, i), models["torch"].module, models["minidp"].module)
        out[how] = type(models["minidp"]).__module__
    sub = dist.new_group(list(range(world)))  # every rank, but not the default group
    out["subgroup"] = [
        _error(lambda w=wrap: pickle_dumps(w(copy.deepcopy(base), process_group=sub)))
        for wrap in WRAPPERS.values()
    ]
    out["logging"] = {name: logging_data(wrap, base, batches) for name, wrap in WRAPPERS.items()}
    dist.barrier()
    return out


def pickle_dumps(obj) -> None:
    torch.save(obj, io.BytesIO())


def logging_data(wrap, base: nn.Module, batches: list) -> dict:
    ddp = wrap(copy.deepcopy(base))
    ddp._set_ddp_runtime_logging_sample_rate(2)
    iterations = []
    for i in range(14):
        _step(ddp, *batches[i % len(batches)])
        iterations.append(ddp._get_ddp_logging_data()["iteration"])
    data = ddp._get_ddp_logging_data()
    error = _error(ddp._set_static_graph)
    after = ddp._get_ddp_logging_data()
    bad_rate = None
    try:
        ddp._set_ddp_runtime_logging_sample_rate(0)
    except ValueError as exc:
        bad_rate = str(exc)
    return {
        "data": data,
        "iterations": iterations,
        "static_graph": (error, after.get("has_error"), after.get("error")),
        "bad_rate": bad_rate,
    }


@pytest.fixture(scope="module")
def results(process_world):
    return process_world(2).run(save_and_copy)


def test_saved_and_copied_ddp_trains_on_like_torchs(results):
    for rank, r in enumerate(results):
        assert r["diffs"] == [], f"rank {rank}: (when, tensor, what, |diff|) {r['diffs']}"
        assert r["torch.save"] == r["deepcopy"] == "minidp.ddp.distributed"


def test_pickling_a_ddp_over_another_group_is_refused_like_torch(results):
    for r in results:
        theirs, ours = r["subgroup"]
        assert theirs is not None and ours.startswith(theirs)
        assert "Pickling/Unpickling are only supported when using DDP with the default" in ours
        assert "Hint: save the module's state_dict()" in ours


def _split(data: dict) -> tuple[dict, dict]:
    clocks = {k: v for k, v in data.items() if k.endswith(CLOCKS)}
    return {k: v for k, v in data.items() if k not in clocks}, clocks


def test_logging_data_has_torchs_fields_and_values(results):
    for r in results:
        theirs, _ = _split(r["logging"]["torch"]["data"])
        ours, clocks = _split(r["logging"]["minidp"]["data"])
        assert {k: ours.get(k) for k in theirs} == theirs  # older torch: fewer fields
        assert r["logging"]["minidp"]["iterations"] == r["logging"]["torch"]["iterations"]
        assert ours["iteration"] == 12 and ours["has_rebuilt_buckets"] == 1  # 13: not sampled
        for name in ("forward_compute", "backward_compute", "backward_comm"):
            assert clocks[f"avg_{name}_time"] >= 1 and clocks[f"{name}_time"] >= 1, name
        overlap = clocks["backward_compute_comm_overlap_time"]
        assert overlap <= min(clocks["backward_compute_time"], clocks["backward_comm_time"])
        assert (
            clocks["forward_compute_time_start"]
            <= clocks["backward_compute_time_start"]
            <= clocks["backward_comm_time_start"]
            <= clocks["backward_comm_time_end"]
        )


def test_set_static_graph_after_training_is_refused_and_logged_like_torch(results):
    for r in results:
        theirs, ours = r["logging"]["torch"], r["logging"]["minidp"]
        assert theirs["static_graph"][0] is not None
        assert "should be called before training loop starts" in ours["static_graph"][0]
        assert ours["static_graph"][0] in theirs["static_graph"][0]  # torch's adds a C++ trace
        assert ours["static_graph"][1] == 1
        assert ours["static_graph"][0] in ours["static_graph"][2]
        assert ours["bad_rate"] == theirs["bad_rate"]


def test_set_static_graph_before_training_is_refused_as_the_argument_is():
    with pytest.raises(WorkerError, match="NotImplementedError: .*static_graph=True is not"):
        run_threads(_static_graph_first, 2)


def _static_graph_first(rank: int, world: int) -> None:
    minidp.DistributedDataParallel(MLP())._set_static_graph()
