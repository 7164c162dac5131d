"""ZeRO-1 under torch's ``Join`` (uneven inputs), against torch's ZeroRedundancyOptimizer.

Rank r gets ``counts[r]`` batches. In one rank process the same seeded model trains
under ``torch.distributed.algorithms.Join([ddp, optimizer])``: torch DDP + torch's
``ZeroRedundancyOptimizer`` (the reference), then every pair with minidp's DDP, minidp's
ZeRO or both. Ranks that run out shadow the others' iterations through the join hooks —
DDP's all-reduces, then the optimizer's step and broadcasts. After each of the rank's own
steps and after the context exits, every parameter must be ``torch.equal``.

The second test is the recipe torch's own ZeRO join test follows on CPU: the user's own
``Joinable`` sets, once its rank has joined, the gradients the others still step on —
through ``optimizer._all_params`` (a list, in torch's order). Every rank steps on the
same gradients; minidp's ZeRO must give torch's bits after every step.

Run: ``pytest tests/test_zero1_join.py``
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from test_zero_support import TinyLM, batch, diffs, loss_of
from torch.distributed.algorithms.join import Join, Joinable, JoinHook
from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

import minidp

CASES = {
    # name: (batches per rank (cycled), optimizer, its options, ZeRO constructor options)
    "adamw": ((3, 5, 2), torch.optim.AdamW, {"lr": 1e-2, "weight_decay": 0.1}, {}),
    "sgd_rank0_no_batches": ((0, 3, 2), torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, {}),
    "adamw_bucket_view": (
        (4, 1, 3),
        torch.optim.AdamW,
        {"lr": 1e-2},
        {"parameters_as_bucket_view": True},
    ),
}


# Which DDP and ZeRO train under one ``Join``: torch's pair is the reference, every other
# pair (minidp's on either side or both) must give its bits.
PAIRS = {
    "torch DDP + minidp ZeRO": (nn.parallel.DistributedDataParallel, "minidp"),
    "minidp DDP + minidp ZeRO": (minidp.DistributedDataParallel, "minidp"),
    "minidp DDP + torch ZeRO": (minidp.DistributedDataParallel, "torch"),
}
ZEROS = {"torch": TorchZero, "minidp": minidp.ZeroRedundancyOptimizer}


def _train(rank: int, ddp_class, zero_class, name: str) -> list[nn.Module]:
    counts, cls, options, zero_options = CASES[name]
    torch.manual_seed(rank)  # ranks start different: DDP broadcasts rank 0's weights
    ddp = ddp_class(TinyLM())
    opt = zero_class(ddp.parameters(), cls, **zero_options, **options)
    snaps = []
    with Join([ddp, opt]):
        for step in range(counts[rank % len(counts)]):
            x, y = batch(rank, step)
            opt.zero_grad()
            loss_of(ddp, x, y).backward()
            opt.step()
            snaps.append(copy.deepcopy(ddp.module))
    snaps.append(copy.deepcopy(ddp.module))  # after the joined ranks' shadow steps
    return snaps


def run_join(rank: int, world: int, names: list[str]) -> dict:
    out = {}
    for name in names:
        ref = _train(rank, nn.parallel.DistributedDataParallel, TorchZero, name)
        for pair, (ddp_class, zero) in PAIRS.items():
            ours = _train(rank, ddp_class, ZEROS[zero], name)
            out[name, pair] = {
                "steps": (len(ref), len(ours)),
                "diffs": [(i, d) for i, (a, b) in enumerate(zip(ours, ref)) for d in diffs(a, b)],
            }
    return out


@pytest.fixture(scope="module")
def joined(process_world):
    cache: dict[int, list[dict]] = {}

    def get(world_size: int) -> list[dict]:
        if world_size not in cache:
            cache[world_size] = process_world(world_size).run(run_join, list(CASES))
        return cache[world_size]

    return get


@pytest.mark.parametrize("pair", list(PAIRS))
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("world_size", [2, 3])
def test_join_with_uneven_inputs_matches_torch(joined, world_size, case, pair):
    for rank, results in enumerate(joined(world_size)):
        r = results[case, pair]
        assert r["steps"][0] == r["steps"][1]
        assert r["diffs"] == [], f"rank {rank}: (snapshot, (param, max|diff|)) {r['diffs'][:6]}"


def test_is_a_torch_joinable():
    assert issubclass(minidp.ZeroRedundancyOptimizer, Joinable)
    assert issubclass(minidp.DistributedDataParallel, Joinable)


def _grads(model: nn.Module, step: int) -> list[torch.Tensor]:
    """The step's gradients, the same on every rank (what DDP would have averaged)."""
    g = torch.Generator().manual_seed(77 + step)
    return [torch.randn(p.shape, generator=g) for p in model.parameters()]


class _SetGrads(JoinHook):
    """After this rank joined: each shadowed step sets the next gradients on every
    parameter the optimizer holds, read as torch's own test reads them."""

    def __init__(self, zero, model: nn.Module, first: int) -> None:
        self.zero, self.model, self.step = zero, model, first

    def main_hook(self) -> None:
        for p, g in zip(self.zero._all_params, _grads(self.model, self.step), strict=True):
            p.grad = g
        self.step += 1


class _GradientSetter(Joinable):
    def __init__(self) -> None:
        super().__init__()

    def join_hook(self, **kwargs) -> JoinHook:
        return _SetGrads(kwargs["zero"], kwargs["model"], kwargs["first"])

    @property
    def join_device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def join_process_group(self):
        return torch.distributed.group.WORLD


def run_gradient_setter(rank: int, world: int) -> dict:
    steps = 2 + rank  # uneven: the last rank steps most, the others shadow it
    out = {}
    for name, zero_class in ZEROS.items():
        torch.manual_seed(0)
        model = TinyLM()
        zero = zero_class(model.parameters(), torch.optim.Adam, lr=1e-2)
        setter, snaps = _GradientSetter(), []
        with Join([setter, zero], zero=zero, model=model, first=steps):
            for step in range(steps):
                Join.notify_join_context(setter)
                for p, g in zip(model.parameters(), _grads(model, step), strict=True):
                    p.grad = g
                zero.step()
                snaps.append(copy.deepcopy(model))
        out[name] = snaps + [copy.deepcopy(model)]
    return {"diffs": [(i, d) for i, (a, b) in enumerate(zip(out["minidp"], out["torch"]))
                      for d in diffs(a, b)], "steps": len(out["minidp"])}  # fmt: skip


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_users_joinable_sets_grads_through_all_params_like_torchs_test(process_world, world_size):
    for rank, r in enumerate(process_world(world_size).run(run_gradient_setter)):
        assert r["steps"] == 2 + rank + 1
        assert r["diffs"] == [], f"rank {rank}: (snapshot, (param, max|diff|)) {r['diffs'][:6]}"
