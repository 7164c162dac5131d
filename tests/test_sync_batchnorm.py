"""minidp.SyncBatchNorm against nn.BatchNorm on the full batch in one process.

torch's own SyncBatchNorm refuses CPU tensors, so the reference is what it promises to
equal: ``nn.BatchNorm{1,2,3}d`` run once on the concatenated batch. Ranks are threads, each
with its own real gloo group (``run_threads``). Per-rank batches are uneven on purpose.

Tolerance: the reference reduces float32 in one order, minidp combines per-rank float64
partial statistics (Chan's formula) and casts back, so results agree to float32 rounding,
not bit for bit: ``rtol=1e-5, atol=1e-6`` (observed worst: outputs 4.8e-7, input grads
1.2e-7, running var 9.5e-7, weight-gradient sums 5.7e-6 — each a few float32 ulps).

Run: ``pytest tests/test_sync_batchnorm.py``
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import minidp
from minidp.launch import WorkerError, run_threads

TOL = {"rtol": 1e-5, "atol": 1e-6}
BN = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}


def _case(sizes: list[int], spatial: tuple, channels: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x = torch.randn(n, channels, *spatial, generator=g) * 3 + 1  # (N, C, *)
    r = torch.randn(n, channels, *spatial, generator=g)  # loss = sum(out * r): dy = r
    return x, r


def _reference(x, r, momentum, steps, affine=True):
    bn = BN[x.dim()](x.shape[1], momentum=momentum, affine=affine)
    if affine:
        with torch.no_grad():
            bn.weight.copy_(torch.linspace(0.5, 1.5, x.shape[1]))
            bn.bias.copy_(torch.linspace(-1, 1, x.shape[1]))
    for _ in range(steps):
        xg = x.clone().requires_grad_()
        out = bn(xg)
        (out * r).sum().backward()
    return bn, out.detach(), xg.grad


def _rank(rank, world, x, r, sizes, momentum, steps, affine=True):
    lo = sum(sizes[:rank])
    xs, rs = x[lo : lo + sizes[rank]], r[lo : lo + sizes[rank]]
    bn = minidp.SyncBatchNorm(x.shape[1], momentum=momentum, affine=affine)
    if affine:
        with torch.no_grad():
            bn.weight.copy_(torch.linspace(0.5, 1.5, x.shape[1]))
            bn.bias.copy_(torch.linspace(-1, 1, x.shape[1]))
    for _ in range(steps):
        xg = xs.clone().requires_grad_()
        out = bn(xg)
        (out * rs).sum().backward()
    grads = (bn.weight.grad.clone(), bn.bias.grad.clone()) if affine else None
    return out.detach(), xg.grad, grads, bn.running_mean.clone(), bn.running_var.clone(), bn


@pytest.mark.parametrize(
    "sizes, spatial, momentum",
    [
        ([3, 5], (), 0.1),  # 2-D input (N, C), uneven
        ([2, 4, 1], (6,), 0.1),  # 3-D (N, C, L), W = 3
        ([4, 2], (3, 2), None),  # 4-D, cumulative running average
        ([1, 2, 3], (2, 2, 2), 0.3),  # 5-D, W = 3
    ],
)
def test_matches_batchnorm_on_the_full_batch(sizes, spatial, momentum):
    x, r = _case(sizes, spatial)
    steps = 2  # a second step: running stats compound, weight grads accumulate
    ref, ref_out, ref_dx = _reference(x, r, momentum, steps)
    ranks = run_threads(_rank, len(sizes), x, r, sizes, momentum, steps)
    torch.testing.assert_close(torch.cat([o for o, *_ in ranks]), ref_out, **TOL)
    torch.testing.assert_close(torch.cat([dx for _, dx, *_ in ranks]), ref_dx, **TOL)
    # weight/bias grads are rank-local sums: together they are the full batch's
    torch.testing.assert_close(sum(g[0] for _, _, g, *_ in ranks), ref.weight.grad, **TOL)
    torch.testing.assert_close(sum(g[1] for _, _, g, *_ in ranks), ref.bias.grad, **TOL)
    for _, _, _, mean, var, bn in ranks:  # every rank tracks the GLOBAL statistics
        torch.testing.assert_close(mean, ref.running_mean, **TOL)
        torch.testing.assert_close(var, ref.running_var, **TOL)
        assert int(bn.num_batches_tracked) == steps


def test_plain_batchnorm_per_rank_differs_which_is_the_point():
    # The check above can fail: per-rank statistics (what DDP gives without SyncBatchNorm)
    # are far from the full batch's.
    x, r = _case([3, 5], ())
    _, ref_out, _ = _reference(x, r, 0.1, 1)
    bn = nn.BatchNorm1d(3)
    with torch.no_grad():
        bn.weight.copy_(torch.linspace(0.5, 1.5, 3))
        bn.bias.copy_(torch.linspace(-1, 1, 3))
    local = torch.cat([bn(x[:3]), bn(x[3:])]).detach()
    assert (local - ref_out).abs().max() > 1e-2


def test_eval_mode_uses_running_stats_without_communicating():
    x, r = _case([2, 3], (4,))

    def rank(rank, world):
        bn = minidp.SyncBatchNorm(3).eval()
        bn.running_mean.fill_(0.5)
        bn.running_var.fill_(2.0)
        return bn(x[:2] if rank == 0 else x[2:])  # an eval forward may differ per rank

    ref = nn.BatchNorm1d(3).eval()
    ref.running_mean.fill_(0.5)
    ref.running_var.fill_(2.0)
    out = run_threads(rank, 2)
    assert torch.equal(torch.cat(out), ref(x))  # same code path as nn.BatchNorm: exact


def test_no_affine_and_convert_sync_batchnorm_keeps_state():
    x, r = _case([2, 2], (3,))
    ref, ref_out, ref_dx = _reference(x, r, 0.1, 1, affine=False)
    ranks = run_threads(_rank, 2, x, r, [2, 2], 0.1, 1, False)
    torch.testing.assert_close(torch.cat([o for o, *_ in ranks]), ref_out, **TOL)
    torch.testing.assert_close(torch.cat([dx for _, dx, *_ in ranks]), ref_dx, **TOL)

    model = nn.Sequential(nn.Conv2d(2, 4, 1), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm1d(3)))
    model[1].running_mean.fill_(0.25)
    weight = model[1].weight
    converted = minidp.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(converted[1], minidp.SyncBatchNorm)
    assert isinstance(converted[2][0], minidp.SyncBatchNorm)
    assert converted[1].weight is weight and torch.all(converted[1].running_mean == 0.25)
    torch_converted = nn.SyncBatchNorm.convert_sync_batchnorm(
        nn.Sequential(nn.Conv2d(2, 4, 1), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm1d(3)))
    )
    assert [type(m).__name__ for m in converted.modules()] == [
        type(m).__name__ for m in torch_converted.modules()
    ]


def _empty_rank(rank, world):
    bn = minidp.SyncBatchNorm(3)
    return bn(torch.randn(0 if rank == 1 else 4, 3))


def _channel_mismatch(rank, world):
    bn = minidp.SyncBatchNorm(3 + rank)
    return bn(torch.randn(4, 3 + rank))


def test_a_rank_with_an_empty_batch_fails_on_every_rank():
    with pytest.raises(WorkerError, match=r"at least one sample .* got counts \[4, 0\]"):
        run_threads(_empty_rank, 2, timeout=20)


def test_a_channel_mismatch_names_the_channels():
    with pytest.raises(WorkerError, match=r"same number of channels on every rank; got \[3, 4\]"):
        run_threads(_channel_mismatch, 2, timeout=20)


def test_a_1d_input_is_refused():
    with pytest.raises(ValueError, match=r"2 or more dims \(N, C, \.\.\.\); got 1-D of shape"):
        minidp.SyncBatchNorm(3)(torch.randn(3))
