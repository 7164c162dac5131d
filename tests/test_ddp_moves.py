"""Moves a training loop makes with DDP, each against torch's DDP on the same inputs.

Inside each rank process the same seeded model trains through torch's
``DistributedDataParallel`` and through minidp's; after every step every parameter and
gradient must be ``torch.equal`` (``test_ddp_support._diffs``):

* torch's own comm hooks (``torch.distributed.algorithms.ddp_comm_hooks``) registered on
  minidp's DDP at 3 ranks: ``allreduce_hook`` and ``fp16_compress_hook`` over several
  buckets, PowerSGD (rank 1, error feedback, warm start, compressing from iteration 2,
  after the bucket rebuild) over one; ``bf16_compress_hook`` is refused on CPU by both,
  in torch's words;
* ``torch.compile`` of the wrapped model: the compiled module, minidp's bookkeeping eager
  — 2 ranks; ``aot_eager`` (dynamo and AOT autograd, where a wrapper's hooks and
  collectives meet the compiler: main's DDP failed there) by default, inductor under
  ``-m slow`` (its C++ compile is seconds a kernel on a cold cache);
* DDP on a subgroup of three ranks of four (``new_group([1, 2, 3])``: group rank 0 is
  global rank 1, whose weights and BatchNorm buffers every member takes), rank 0 outside.

Run: ``pytest tests/test_ddp_moves.py``
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from test_ddp_support import MLP, ConvBN, _conv_data, _diffs, _mlp_data
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

import minidp

HOOKS = ["allreduce_hook", "fp16_compress_hook", "powerSGD_hook"]


def _hook(name: str, group):
    """(state, hook): a fresh state per DDP (PowerSGD's holds per-bucket error and factors)."""
    if name != "powerSGD_hook":
        return group, getattr(default_hooks, name)
    state = powersgd.PowerSGDState(
        process_group=group,
        matrix_approximation_rank=1,
        start_powerSGD_iter=2,
        min_compression_rate=0.5,  # compress even these small matrices
        use_error_feedback=True,
        warm_start=True,
        random_seed=7,
    )
    return state, powersgd.powerSGD_hook


def _train(rank, model: nn.Module, data, steps: int, prepare, group=None, cap=0.001) -> list:
    """Train ``model`` under torch's DDP and minidp's; ``prepare(ddp)`` -> what to call."""
    with torch.no_grad():  # ranks start apart: the constructor's broadcast must fix it
        for p in model.parameters():
            p.add_(0.01 * rank)
    pairs = []
    for wrap in (nn.parallel.DistributedDataParallel, minidp.DistributedDataParallel):
        module = copy.deepcopy(model)
        ddp = wrap(module, bucket_cap_mb=cap, process_group=group)
        pairs.append((module, prepare(ddp), torch.optim.SGD(ddp.parameters(), lr=0.05)))
    g = torch.Generator().manual_seed(300 + rank)
    diffs = []
    for step in range(steps):
        x, y = data(g)
        for _, run, opt in pairs:
            opt.zero_grad()
            F.mse_loss(run(x), y).backward()
            opt.step()
        diffs += _diffs(step, pairs[0][0], pairs[1][0])
    return diffs


def with_torch_hooks(rank: int, world: int, names: list[str]) -> dict:
    out = {}
    for name in names:
        torch.manual_seed(11)

        def prepare(ddp, name=name):
            ddp.register_comm_hook(*_hook(name, None))
            return ddp

        # PowerSGD: one bucket. Its callbacks start the next all-reduce from gloo's thread,
        # so with several buckets in flight torch's DDP may issue them in another order on
        # each rank (seen: a 60 s timeout on gloo); minidp's comm thread waits bucket by bucket
        cap = None if name == "powerSGD_hook" else 0.001
        out[name] = _train(rank, MLP(), _mlp_data, 3, prepare, cap=cap)
    out["bf16"] = []
    for wrap in (nn.parallel.DistributedDataParallel, minidp.DistributedDataParallel):
        try:
            wrap(MLP()).register_comm_hook(None, default_hooks.bf16_compress_hook)
        except TypeError as exc:
            out["bf16"].append(str(exc))
    dist.barrier()
    return out


def compiled(rank: int, world: int, backend: str) -> list:
    torch._dynamo.reset()
    torch.manual_seed(12)
    compile_ = functools.partial(torch.compile, backend=backend)
    diffs = _train(rank, MLP(), _mlp_data, 3, compile_, cap=None)  # one bucket:
    # torch's graph splitter asserts on first buckets larger than the next
    dist.barrier()
    return diffs


def on_a_subgroup(rank: int, world: int, members: list[int]) -> list | None:
    group = dist.new_group(members)  # every rank calls it, members or not
    torch.manual_seed(13)
    model = ConvBN()  # BatchNorm buffers: broadcast from the group's first rank
    diffs = _train(rank, model, _conv_data, 3, lambda ddp: ddp, group) if rank in members else None
    dist.barrier()
    return diffs


@pytest.fixture(scope="module")
def hooked(process_world):
    return process_world(3).run(with_torch_hooks, HOOKS)


@pytest.mark.parametrize("name", HOOKS)
def test_torchs_own_comm_hooks_on_minidp_match_torch(hooked, name):
    for rank, r in enumerate(hooked):
        assert r[name] == [], f"rank {rank}: (step, tensor, what, |diff|) {r[name]}"


def test_torchs_bf16_hook_is_refused_on_cpu_like_torch(hooked):
    if torch.version.cuda or torch.version.hip:
        pytest.skip("a CUDA build: torch accepts the bf16 hook where NCCL has bf16")
    for r in hooked:
        theirs, ours = r["bf16"]
        assert ours.startswith(theirs) and "Hint: on CPU (gloo) use fp16_compress_hook" in ours


@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_torch_compile_of_the_wrapped_model_matches_torch(process_world, backend):
    for rank, diffs in enumerate(process_world(2).run(compiled, backend)):
        assert diffs == [], f"rank {rank}: {diffs}"


def test_ddp_on_a_subgroup_of_three_ranks_matches_torch(process_world):
    results = process_world(4).run(on_a_subgroup, [1, 2, 3])
    assert results[0] is None
    for rank, diffs in enumerate(results[1:], start=1):
        assert diffs == [], f"rank {rank}: {diffs}"
