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


def _reference(x, r, momentum, steps, affine=True, param_dtype=torch.float32):
    bn = BN[x.dim()](x.shape[1], momentum=momentum, affine=affine, dtype=param_dtype)
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
        ([3, 0, 4], (3, 2), 0.1),  # 4-D, W = 3, rank 1's batch empty (main: refused)
        ([0, 5], (), None),  # 2-D, rank 0's batch empty: rank 1's statistics are the batch's
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


# ---- low-precision input, fp32 module: what autocast or a bf16 activation feeds a BatchNorm ----

# nn.BatchNorm on CPU with a bf16/fp16 input and fp32 weights returns the output and input
# gradient in the input's dtype, but keeps weight/bias gradients and running stats in fp32 and
# accumulates the statistics in fp32. minidp must give the same dtypes and the same numbers.
#
# Tolerances, the tightest that hold (measured over 48 cases: 2 dtypes x 4 shapes x 6 seeds):
# * output and input gradient, in bf16/fp16: at most ONE unit in the last place, so
#   ``rtol = finfo(dtype).eps`` (an ulp is <= eps * |value|). torch rounds its fp32 result,
#   minidp its float64 result, to bf16/fp16: when the exact value sits near a rounding boundary
#   the two land on neighbouring values (seen: 2 outputs per dtype differ, by one ulp; input
#   gradients never did). ``atol = 1e-5`` covers out = xhat * w + b cancelling to ~0, where
#   torch's fp32 rounding (~1e-7 of |b|) is many ulps of the tiny result.
# * weight/bias gradients and running stats, fp32: ``TOL`` as for fp32 input. Both sides sum
#   the same exactly-representable bf16 products, torch in fp32, minidp in float64 rounded once
#   (seen: weight grads 4.1e-6 relative, running var 2.3e-7). The old code rounded them to the
#   input's dtype first: weight grads off by up to 4.2e-2, running mean by 6.4e-4 in the
#   cases below -- each of those alone fails here.
LOW = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize(
    "sizes, spatial",
    [([5, 7], (4,)), ([3, 6, 4], (3, 2))],  # W = 2 (N, C, L) and W = 3 (N, C, H, W), uneven
    ids=["W2", "W3"],
)
def test_low_precision_input_matches_batchnorm_dtypes_and_values(dtype, sizes, spatial):
    x, r = _case(sizes, spatial, channels=4)
    x, r = x.to(dtype), r.to(dtype)  # (N, C, *) in bf16/fp16; the modules stay fp32
    steps = 2
    ref, ref_out, ref_dx = _reference(x, r, 0.1, steps)
    ranks = run_threads(_rank, len(sizes), x, r, sizes, 0.1, steps)
    out = torch.cat([o for o, *_ in ranks])
    dx = torch.cat([d for _, d, *_ in ranks])
    dw = sum(g[0] for _, _, g, *_ in ranks)
    db = sum(g[1] for _, _, g, *_ in ranks)
    _, _, _, mean, var, _ = ranks[0]
    mine = {"out": out, "dx": dx, "dw": dw, "db": db, "mean": mean, "var": var}
    torch_ = {
        "out": ref_out,
        "dx": ref_dx,
        "dw": ref.weight.grad,
        "db": ref.bias.grad,
        "mean": ref.running_mean,
        "var": ref.running_var,
    }
    # dtypes first: bf16 in, bf16 out and dx; fp32 parameter grads and buffers (as torch)
    assert {k: v.dtype for k, v in mine.items()} == {k: v.dtype for k, v in torch_.items()}
    assert torch_["out"].dtype == torch_["dx"].dtype == dtype
    assert torch_["dw"].dtype == torch_["var"].dtype == torch.float32
    low = {"rtol": torch.finfo(dtype).eps, "atol": 1e-5}  # one bf16/fp16 ulp, see above
    for k in ("out", "dx"):
        torch.testing.assert_close(mine[k], torch_[k], **low, msg=lambda m, k=k: f"{k}: {m}")
    for k in ("dw", "db", "mean", "var"):
        torch.testing.assert_close(mine[k], torch_[k], **TOL, msg=lambda m, k=k: f"{k}: {m}")
    for _, _, _, m, v, _ in ranks[1:]:  # every rank tracks the same global statistics
        assert torch.equal(m, mean) and torch.equal(v, var)

    # Against the truth (the same bf16 numbers, float64 module): minidp's error is of the
    # order of torch's own (in practice below it: float64 inside). The old code's weight-grad
    # error was 5e-3 to 4e-2 against torch's 2e-6 to 6e-6 in these four cases.
    truth, t_out, t_dx = _reference(x.double(), r.double(), 0.1, steps, param_dtype=torch.float64)
    exact = {
        "out": t_out,
        "dx": t_dx,
        "dw": truth.weight.grad,
        "db": truth.bias.grad,
        "mean": truth.running_mean,
        "var": truth.running_var,
    }
    for k, t in exact.items():
        err_mine = (mine[k].double() - t).abs().max().item()
        err_torch = (torch_[k].double() - t).abs().max().item()
        # floor: one rounding to the result's dtype (torch's db error is exactly 0 here: its
        # fp32 sums of bf16 dy are exact, and so are minidp's)
        floor = torch.finfo(mine[k].dtype).eps * t.abs().max().item()
        assert err_mine <= 2 * err_torch + floor, (k, err_mine, err_torch)


def test_a_constant_channel_stays_finite_like_batchnorm():
    # Variance 0: only eps keeps 1/sqrt(var + eps) finite. Channel 1 is one value on every
    # rank (global variance exactly 0); channel 2 is constant within each rank but differs
    # between them (every rank's own M2 is 0, the global variance is not: Chan's formula must
    # get it from the means alone). Values are exact in fp32 so both sides see var == 0.
    sizes = [3, 5]
    x, r = _case(sizes, (4,), channels=3)
    x[:, 1] = 2.5
    x[:3, 2], x[3:, 2] = 1.0, 3.0
    ref, ref_out, ref_dx = _reference(x, r, 0.1, 2)
    ranks = run_threads(_rank, 2, x, r, sizes, 0.1, 2)
    out = torch.cat([o for o, *_ in ranks])
    dx = torch.cat([d for _, d, *_ in ranks])
    dw = sum(g[0] for _, _, g, *_ in ranks)
    db = sum(g[1] for _, _, g, *_ in ranks)
    _, _, _, mean, var, _ = ranks[0]
    for name, t in {"out": out, "dx": dx, "dw": dw, "db": db, "var": var}.items():
        assert torch.isfinite(t).all(), f"{name} has non-finite values: {t}"
    assert torch.isfinite(ref_out).all() and torch.isfinite(ref_dx).all()
    # The constant channel's output is its bias: minidp's (x - mean) * invstd is exactly 0.
    # torch's CPU kernel folds the statistics into out = x * a + c with a = w / sqrt(eps) ~ 316
    # and c = b - mean * a, so two terms of ~2.5 * 316 = 790 cancel and leave the fp32 rounding
    # of 790 (one ulp: 6.1e-5; seen 1.5e-5). That, not TOL's 1e-6, is the honest atol here;
    # without eps minidp gives NaN, which no tolerance accepts.
    a = ref.weight[1].item() / ref.eps**0.5
    atol = torch.finfo(torch.float32).eps * 2.5 * a  # one fp32 ulp-ish of |x * a|: 9.4e-5
    torch.testing.assert_close(out, ref_out, rtol=TOL["rtol"], atol=atol)
    assert torch.all(out[:, 1] == ref.bias[1])  # exactly the bias
    torch.testing.assert_close(dx, ref_dx, **TOL)
    torch.testing.assert_close(dw, ref.weight.grad, **TOL)
    torch.testing.assert_close(db, ref.bias.grad, **TOL)
    torch.testing.assert_close(mean, ref.running_mean, **TOL)
    torch.testing.assert_close(var, ref.running_var, **TOL)


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


def _one_value_in_all(rank, world):
    bn = minidp.SyncBatchNorm(3)
    return bn(torch.randn(1 if rank == 1 else 0, 3))


def _channel_mismatch(rank, world):
    bn = minidp.SyncBatchNorm(3 + rank)
    return bn(torch.randn(4, 3 + rank))


def test_one_value_per_channel_over_all_ranks_is_refused_as_batchnorm_refuses_it():
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        nn.BatchNorm1d(3)(torch.randn(1, 3))  # the full batch, in one process
    with pytest.raises(
        WorkerError, match=r"Expected more than 1 value per channel .* got 1 over every rank"
    ):
        run_threads(_one_value_in_all, 2, timeout=20)


def test_a_channel_mismatch_names_the_channels():
    with pytest.raises(WorkerError, match=r"same number of channels on every rank; got \[3, 4\]"):
        run_threads(_channel_mismatch, 2, timeout=20)


def test_a_1d_input_is_refused():
    with pytest.raises(ValueError, match=r"2 or more dims \(N, C, \.\.\.\); got 1-D of shape"):
        minidp.SyncBatchNorm(3)(torch.randn(3))
