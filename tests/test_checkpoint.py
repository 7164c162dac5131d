"""Checkpoints lose nothing: a run saved half-way and resumed in FRESH objects lands on the
same bits as a run that never stopped.

The recipe (lesson 15): rank 0 saves ``ddp.module.state_dict()``, the optimizer's state and
where the data stood (sampler epoch, batches done in it); ``barrier()``; every rank loads
with ``torch.load(..., map_location="cpu", weights_only=True)`` into a NEW model (other
initial weights, overwritten), a NEW ``DistributedDataParallel``, a NEW optimizer and a NEW
``DistributedSampler``, skips the batches already done, and trains on.

Claims, on 2 real rank processes, for SGD with momentum and for Adam over 2 shuffled epochs
(the checkpoint falls in the middle of epoch 1):

* resumed == uninterrupted, ``torch.equal`` for every parameter and optimizer tensor;
* the test can fail: resuming without the optimizer state, or without ``set_epoch``, gives
  other weights (so equality above is not vacuous);
* uninterrupted minidp DDP == uninterrupted torch DDP, ``torch.equal``.

Run: ``pytest tests/test_checkpoint.py``
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import minidp
from minidp.comm import barrier

SAMPLES, BATCH, EPOCHS = 100, 8, 2  # 50 samples per rank: 7 batches, the last one short
SAVE_AT = (1, 3)  # (epoch, batches done in it) when the checkpoint is written
OPTIMIZERS = ("sgd_momentum", "adam")


def _model(seed: int) -> nn.Sequential:
    g = torch.Generator().manual_seed(seed)  # explicit generator: same weights in every rank
    model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
    return model


def _optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


def _dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(SAMPLES, 12, generator=g)
    return TensorDataset(x, (x[:, :3] + x[:, 3:6]).argmax(1))


def _train(ddp, opt, sampler, start=(0, 0), stop=None) -> None:
    """Train from ``start`` = (epoch, batches done in it) to ``stop`` (same form) or the end."""
    loader = DataLoader(sampler.dataset, batch_size=BATCH, sampler=sampler)
    for epoch in range(start[0], EPOCHS):
        sampler.set_epoch(epoch)
        skip = start[1] if epoch == start[0] else 0
        for done, (xb, yb) in enumerate(itertools.islice(loader, skip, None), start=skip):
            if (epoch, done) == stop:
                return
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(xb), yb).backward()
            opt.step()


def _state(ddp, opt) -> dict:
    """A snapshot (state_dict()s hold the live tensors, which training goes on changing)."""
    return copy.deepcopy({"model": ddp.module.state_dict(), "optim": opt.state_dict()})


def _runs(rank: int, world: int, folder: str, optim_name: str) -> dict:
    """Rank function: uninterrupted, saved-and-resumed (plus two lossy resumes), torch DDP."""
    data = _dataset()

    def fresh(wrapper, seed: int):
        ddp = wrapper(_model(seed))
        return ddp, _optimizer(optim_name, ddp.parameters()), minidp.DistributedSampler(data)

    out = {}
    ddp, opt, sampler = fresh(minidp.DistributedDataParallel, 0)
    _train(ddp, opt, sampler)
    out["uninterrupted"] = _state(ddp, opt)

    ddp, opt, sampler = fresh(minidp.DistributedDataParallel, 0)
    _train(ddp, opt, sampler, stop=SAVE_AT)
    path = f"{folder}/{optim_name}.pt"
    if rank == 0:  # one writer; every rank holds the same model
        torch.save({**_state(ddp, opt), "epoch": SAVE_AT[0], "batches_done": SAVE_AT[1]}, path)
    barrier()  # nobody loads before rank 0 has finished writing
    del ddp, opt, sampler  # the "crash": nothing survives but the file
    for variant in ("resumed", "no_optimizer_state", "no_set_epoch"):
        # A new load per resume: the optimizer ADOPTS the loaded tensors (no copy when dtype
        # and device already fit) and updates them in place, so a shared dict would leak.
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        where = (ckpt["epoch"], ckpt["batches_done"])
        ddp, opt, sampler = fresh(minidp.DistributedDataParallel, 99)  # other weights
        ddp.module.load_state_dict(ckpt["model"])
        if variant != "no_optimizer_state":
            opt.load_state_dict(ckpt["optim"])
        if variant == "no_set_epoch":
            # resume with the sampler still at epoch 0's shuffle for the rest of epoch 1
            sampler.set_epoch = lambda epoch: None
        _train(ddp, opt, sampler, start=where)
        out[variant] = _state(ddp, opt)

    ddp, opt, sampler = fresh(nn.parallel.DistributedDataParallel, 0)
    _train(ddp, opt, sampler)
    out["torch_ddp"] = _state(ddp, opt)
    barrier()
    return out


def _tensors(state: dict) -> list[tuple[str, torch.Tensor]]:
    """Every tensor in a model+optimizer state, with a name saying where it sits."""
    found = [(f"model.{k}", v) for k, v in state["model"].items()]
    for index, per_param in sorted(state["optim"]["state"].items()):
        for key, value in sorted(per_param.items()):
            found.append((f"optim.state[{index}].{key}", torch.as_tensor(value)))
    return found


def _same(a: dict, b: dict) -> bool:
    ta, tb = _tensors(a), _tensors(b)
    return [n for n, _ in ta] == [n for n, _ in tb] and all(
        torch.equal(x, y) for (_, x), (_, y) in zip(ta, tb)
    )


@pytest.fixture(scope="module")
def runs(process_world, tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoints")
    world = process_world(2)
    return {name: world.run(_runs, str(folder), name) for name in OPTIMIZERS}


@pytest.mark.parametrize("optim_name", OPTIMIZERS)
def test_resumed_run_is_bit_identical_to_uninterrupted(runs, optim_name):
    for rank, out in enumerate(runs[optim_name]):
        reference = out["uninterrupted"]
        assert len(reference["optim"]["state"]) == 4  # optimizer state exists to be lost
        for (name, want), (_, got) in zip(_tensors(reference), _tensors(out["resumed"])):
            assert torch.equal(got, want), f"rank {rank}: {name} differs after resuming"
        assert out["resumed"]["optim"]["param_groups"] == reference["optim"]["param_groups"]
    assert _same(runs[optim_name][0]["resumed"], runs[optim_name][1]["resumed"])


@pytest.mark.parametrize("optim_name", OPTIMIZERS)
def test_lossy_resumes_differ(runs, optim_name):
    """Without the optimizer state or the sampler epoch, the run ends elsewhere."""
    for out in runs[optim_name]:
        reference = out["uninterrupted"]["model"]
        for variant in ("no_optimizer_state", "no_set_epoch"):
            lossy = out[variant]["model"]
            assert not all(torch.equal(lossy[k], reference[k]) for k in reference), variant


@pytest.mark.parametrize("optim_name", OPTIMIZERS)
def test_uninterrupted_minidp_equals_torch_ddp(runs, optim_name):
    for rank, out in enumerate(runs[optim_name]):
        ours, theirs = _tensors(out["uninterrupted"]), _tensors(out["torch_ddp"])
        for (name, a), (_, b) in zip(ours, theirs, strict=True):
            assert torch.equal(a, b), f"rank {rank}: {name} differs from torch DDP"


# ---- loading into the wrong thing: torch's own clear errors ----------------------------


def test_checkpoint_into_a_model_of_another_shape(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"model": _model(0).state_dict()}, path)
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    wider = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
    with pytest.raises(
        RuntimeError,
        match=r"size mismatch for 0\.weight: copying a param with shape torch\.Size\(\[24, 12\]\) "
        r"from checkpoint, the shape in current model is torch\.Size\(\[32, 12\]\)",
    ):
        wider.load_state_dict(ckpt["model"])


def test_ddp_state_dict_into_a_plain_model_names_the_prefix():
    def wrapped_keys(rank, world):
        return minidp.DistributedDataParallel(_model(0)).state_dict()

    (state,) = minidp.launch.run_threads(wrapped_keys, 1)
    with pytest.raises(
        RuntimeError, match=r"(?s)Missing key\(s\).*Unexpected key\(s\) in state_dict: \"module\.0"
    ):
        _model(0).load_state_dict(state)


def test_optimizer_state_for_other_parameters():
    saved = _optimizer("sgd_momentum", _model(0).parameters()).state_dict()
    smaller = _optimizer("sgd_momentum", nn.Linear(12, 3).parameters())
    with pytest.raises(ValueError, match=r"doesn't match the size of optimizer's group"):
        smaller.load_state_dict(saved)
