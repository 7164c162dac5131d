"""On a machine with CUDA: minidp's pieces against torch's, on the GPU (``pytest -m gpu``).

Every test here needs one CUDA device and skips, with that reason, without it. With one
GPU (a laptop, a hosted notebook) the multi-rank checks put two ranks on the same GPU
with gloo — NCCL refuses two ranks on one device — which is exactly the case where gloo
must copy device memory through the host (``minidp.comm.device``):

* DataParallel on ``cuda:0`` against ``torch.nn.DataParallel`` on the same device;
* every collective on CUDA tensors over gloo against torch's ``dist`` collectives;
* DDP with ``device_ids=[0]``, inputs given on the CPU (moved by the wrapper), against
  torch's DDP — over gloo with 2 ranks on one GPU, and over NCCL with 1 rank;
* DDP + ZeroRedundancyOptimizer under ``Join`` with uneven inputs on CUDA;
* ``fully_shard`` with a bf16 ``MixedPrecisionPolicy`` on CUDA against FSDP2 (NCCL, 1 rank);
* minidp's SyncBatchNorm against torch's own ``nn.SyncBatchNorm`` (CUDA only);
* the pytorch/examples-style script with ``--device cuda``, torch's classes vs minidp's.

Bit-exactness: the same kernels run on the same device in both libraries, and gloo's
reductions add in the order minidp's ring reproduces; the one exception (SyncBatchNorm,
other arithmetic) says its tolerance and why.

Run: ``pytest -m gpu`` (on a CPU-only machine every test reports its skip reason).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from test_ddp_support import MLP, ConvBN, _conv_data, _diffs
from test_real_scripts import assert_same, run_both_launches, saved
from torch_versions import release

import minidp
from minidp.launch import spawn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
GPU = torch.device("cuda", 0)


def test_data_parallel_on_cuda_equals_torch_data_parallel():
    torch.manual_seed(0)
    model = ConvBN().to(GPU)
    twin = copy.deepcopy(model)
    ours = minidp.DataParallel(model, device_ids=[0])
    theirs = nn.DataParallel(twin, device_ids=[0])
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, theirs)]
    g = torch.Generator().manual_seed(1)
    for step in range(3):
        x, y = _conv_data(g)  # on the CPU: both wrappers move them to cuda:0
        for dp, opt in zip((ours, theirs), opts):
            opt.zero_grad()
            F.mse_loss(dp(x), y.to(GPU)).backward()
            opt.step()
        assert _diffs(step, twin, model) == []


def collectives_on_cuda(rank: int, world: int) -> list:
    """minidp's collectives vs torch's, on CUDA tensors over gloo; every mismatch."""
    bad = []
    for numel in (5, 70_000, 300_000):  # the direct path, and the ring above 256 KiB
        g = torch.Generator().manual_seed(numel + rank)
        x = torch.randn(numel, generator=g).to(GPU)
        ours, theirs = x.clone(), x.clone()
        minidp.comm.all_reduce(ours)
        dist.all_reduce(theirs)
        bad += [] if torch.equal(ours, theirs) and ours.is_cuda else [("all_reduce", numel)]
        ours, theirs = x.clone(), x.clone()
        minidp.comm.broadcast(ours, src=1)
        dist.broadcast(theirs, src=1)
        bad += [] if torch.equal(ours, theirs) else [("broadcast", numel)]
        outs = [torch.empty_like(x) for _ in range(world)]
        refs = [torch.empty_like(x) for _ in range(world)]
        minidp.comm.all_gather(outs, x)
        dist.all_gather(refs, x)
        bad += [] if all(map(torch.equal, outs, refs)) else [("all_gather", numel)]
        if release(torch.__version__) >= (2, 8):  # gloo's reduce_scatter
            inputs = [x * (i + 1) for i in range(world)]
            out, ref = torch.empty_like(x), torch.empty_like(x)
            minidp.comm.reduce_scatter(out, inputs)
            dist.reduce_scatter(ref, inputs)
            bad += [] if torch.equal(out, ref) else [("reduce_scatter", numel)]
            flat = torch.cat(inputs)  # (world * numel,) on the GPU; ZeRO-2's scratch form
            minidp.comm.reduce_scatter_tensor(out, flat.clone(), input_is_scratch=True)
            dist.reduce_scatter_tensor(ref, flat)
            bad += [] if torch.equal(out, ref) and out.is_cuda else [("rs_tensor", numel)]
        out, ref = torch.empty(world * numel, device=GPU), torch.empty(world * numel, device=GPU)
        minidp.comm.all_gather_into_tensor(out, x)
        dist.all_gather_into_tensor(ref, x)
        bad += [] if torch.equal(out, ref) else [("all_gather_into_tensor", numel)]
    return bad


def test_collectives_on_cuda_tensors_over_gloo_equal_torchs(process_world):
    assert process_world(2).run(collectives_on_cuda) == [[], []]


def ddp_on_cuda(rank: int, world: int, steps: int = 4) -> list:
    torch.manual_seed(5)
    model = ConvBN()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * rank)  # ranks start different: the broadcast must fix it
    m_ref, m_mine = copy.deepcopy(model).to(GPU), copy.deepcopy(model).to(GPU)
    ref = nn.parallel.DistributedDataParallel(m_ref, device_ids=[0])
    mine = minidp.DistributedDataParallel(m_mine, device_ids=[0])
    opts = [torch.optim.SGD(d.parameters(), lr=0.05, momentum=0.9) for d in (ref, mine)]
    g = torch.Generator().manual_seed(40 + rank)
    diffs = []
    for step in range(steps):
        x, y = _conv_data(g)  # CPU inputs: device_ids=[0] moves them
        for ddp, opt in zip((ref, mine), opts):
            opt.zero_grad()
            F.mse_loss(ddp(x), y.to(GPU)).backward()
            opt.step()
        diffs += _diffs(step, m_ref, m_mine)
    return diffs


def test_ddp_with_device_ids_two_ranks_on_one_gpu_over_gloo(process_world):
    assert process_world(2).run(ddp_on_cuda) == [[], []]


def test_ddp_with_device_ids_over_nccl():
    assert spawn(ddp_on_cuda, 1, backend="nccl") == [[]]


def zero_join_on_cuda(rank: int, world: int) -> list:
    """DDP + ZeRO under Join, uneven inputs: torch's pair vs minidp's pair, on cuda:0."""
    from torch.distributed.algorithms.join import Join
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

    runs = []
    for ddp_class, zero_class in (
        (nn.parallel.DistributedDataParallel, TorchZero),
        (minidp.DistributedDataParallel, minidp.ZeroRedundancyOptimizer),
    ):
        torch.manual_seed(rank)
        ddp = ddp_class(MLP().to(GPU), device_ids=[0])
        opt = zero_class(ddp.parameters(), torch.optim.AdamW, lr=1e-2)
        g = torch.Generator().manual_seed(rank)
        with Join([ddp, opt]):
            for _ in range(3 + 2 * rank):
                opt.zero_grad()
                F.mse_loss(
                    ddp(torch.randn(8, 16, generator=g)), torch.zeros(8, 4, device=GPU)
                ).backward()
                opt.step()
        runs.append(copy.deepcopy(ddp.module))
    return _diffs(0, *runs)


def test_ddp_and_zero_under_join_on_cuda(process_world):
    assert process_world(2).run(zero_join_on_cuda) == [[], []]


def fully_shard_bf16(rank: int, world: int) -> list:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    base = nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)
    )
    mesh = init_device_mesh("cuda", (world,))
    policy = dict(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    models = []
    for shard, mp in (
        (fully_shard, MixedPrecisionPolicy),
        (minidp.fully_shard, minidp.MixedPrecisionPolicy),
    ):
        model = copy.deepcopy(base).to(GPU)
        for layer in model[::2]:
            shard(layer, mesh=mesh, mp_policy=mp(**policy))
        shard(model, mesh=mesh, mp_policy=mp(**policy))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(7)
        for _ in range(3):
            opt.zero_grad()
            x = torch.randn(8, 16, generator=g).to(GPU)
            F.mse_loss(model(x).float(), torch.zeros(8, 4, device=GPU)).backward()
            opt.step()
        models.append({k: _full(v) for k, v in model.state_dict().items()})
    return [k for k in models[0] if not torch.equal(models[0][k], models[1][k])]


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def test_fully_shard_bf16_on_cuda_equals_fsdp2():
    if release(torch.__version__) < (2, 6):
        pytest.skip(f"torch {torch.__version__}: FSDP2 is public from 2.6")
    assert spawn(fully_shard_bf16, 1, backend="nccl") == [[]]


def sync_batchnorm(rank: int, world: int) -> dict:
    torch.manual_seed(3)
    theirs = nn.SyncBatchNorm(6).to(GPU)
    ours = minidp.SyncBatchNorm(6).to(GPU)
    ours.load_state_dict(theirs.state_dict())
    g = torch.Generator().manual_seed(rank)
    x = (torch.randn(5 + rank, 6, 4, 4, generator=g) * 3 + 1).to(GPU)
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    outs = [bn(xi) for bn, xi in zip((theirs, ours), xs)]
    for out in outs:
        (out * out.detach().flip(0)).sum().backward()
    pairs = {"output": outs, "input grad": [xi.grad for xi in xs]}
    pairs |= {
        f"{k}": [dict(theirs.named_parameters())[k].grad, p.grad]
        for k, p in ours.named_parameters()
    }
    pairs |= {k: [theirs.state_dict()[k], v] for k, v in ours.state_dict().items()}
    out = {}
    for k, (a, b) in pairs.items():
        try:
            torch.testing.assert_close(b.float(), a.float())
        except AssertionError as exc:
            out[k] = str(exc).splitlines()[0]
    return out


def test_sync_batchnorm_close_to_torchs_own_on_cuda(process_world):
    """float32 default tolerances (rtol 1.3e-6, atol 1e-5): torch's CUDA kernels combine
    per-rank statistics in float32 with their own reduction order, minidp in float64 with
    Chan's formula, so the two round differently; the outputs agree to a few ulps."""
    assert process_world(2).run(sync_batchnorm) == [{}, {}]


def test_examples_style_script_on_cuda_gives_torchs_bits(tmp_path):
    script = "examples_style_ddp.py"
    theirs = saved(run_both_launches(script, "torch", tmp_path, ["--device", "cuda"]))
    ours = saved(run_both_launches(script, "minidp", tmp_path, ["--device", "cuda"]))
    assert_same(theirs, ours, script)
