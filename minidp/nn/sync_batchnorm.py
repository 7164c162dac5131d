"""SyncBatchNorm: BatchNorm whose batch statistics span every rank, on minidp's collectives.

Under DP or DDP each rank normalises with the mean and variance of *its own* slice of the
batch: with 2 ranks a BatchNorm layer sees half the batch, and its statistics (and running
averages) differ from one process on the full batch. ``SyncBatchNorm`` gathers every
rank's count, mean and spread, so each rank normalises with the global batch's statistics
— the same numbers as ``nn.BatchNorm`` on the whole batch in one process. torch's own
``torch.nn.SyncBatchNorm`` does this with CUDA kernels and refuses CPU tensors; this one
is plain tensor code on minidp's ``all_gather`` / ``all_reduce``, so it runs on CPU.

Per training forward (x: ``(N, C, *)`` on each rank, N may differ between ranks):
1. each rank: count n_r, per-channel mean m_r and squared deviations M2_r;   # (C,)
2. ``all_gather`` of (n, C, m, M2) from every rank; a rank with an empty batch or another
   channel count makes *every* rank raise the same error (nobody waits forever);
3. global mean and variance by Chan's parallel formula (exact combination of the parts);
4. normalise locally; running stats updated with the unbiased variance over all N.
Backward: each rank sums dy and dy·(x-mean) per channel; one ``all_reduce`` adds them up,
and every rank computes its input gradient from the global sums. weight/bias gradients
stay local sums — DDP averages them across ranks like any other gradient.
Dtypes follow ``nn.BatchNorm`` (e.g. bf16 input into an fp32 module): the statistics are
computed in float64 whatever the input, the output and input gradient come back in the
input's dtype, weight/bias gradients in the parameters' dtype and running stats in the
buffers' (fp32 there) — each float64 value rounded once, never through bf16.

Test: ``pytest tests/test_sync_batchnorm.py``; lesson: ``python lessons/24_sync_batchnorm.py``
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from minidp import comm


def _global_stats(x: torch.Tensor, group) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean, biased var, total count) of channels over every rank's ``x``: (C,), (C,), ()."""
    c = x.shape[1]
    flat = x.transpose(0, 1).reshape(c, -1).double()  # (C, n_r): stats in float64
    n = flat.shape[1]
    mean = flat.mean(1) if n else torch.zeros(c, dtype=torch.float64, device=x.device)
    m2 = ((flat - mean[:, None]) ** 2).sum(1)  # (C,) squared deviations from the local mean
    world = comm.get_world_size(group)
    # First the shapes, so that a mismatch is an error on every rank, not a wrong-size gather.
    head = torch.tensor([float(n), float(c)], dtype=torch.float64)
    heads = [torch.empty_like(head) for _ in range(world)]
    comm.all_gather(heads, head, group=group)
    counts = [int(h[0]) for h in heads]
    channels = [int(h[1]) for h in heads]
    if len(set(channels)) > 1:
        raise ValueError(
            f"SyncBatchNorm: expected the same number of channels on every rank; got "
            f"{channels} (rank -> C). Hint: every rank must run the same model on inputs "
            "of shape (N, C, ...)."
        )
    if min(counts) == 0:
        raise ValueError(
            f"SyncBatchNorm: expected at least one sample per channel on every rank in "
            f"training; got counts {counts} (rank -> N * spatial). Hint: drop or pad the last "
            "uneven batch (DistributedSampler(drop_last=True)), or run eval mode."
        )
    part = torch.cat([mean, m2])  # (2C,)
    parts = [torch.empty_like(part) for _ in range(world)]
    comm.all_gather(parts, part, group=group)
    ns = torch.tensor(counts, dtype=torch.float64, device=x.device)[:, None]  # (world, 1)
    means, m2s = torch.stack(parts).split(c, dim=1)  # (world, C) each
    total = ns.sum()
    g_mean = (ns * means).sum(0) / total  # (C,)
    g_m2 = (m2s + ns * (means - g_mean) ** 2).sum(0)  # Chan et al.: exact combination
    return g_mean, g_m2 / total, total


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, group, stats):
        mean, var, total = stats  # float64, (C,), (C,), ()
        invstd = (var + eps).rsqrt()
        shape = (1, -1) + (1,) * (x.dim() - 2)  # broadcast (C,) over (N, C, *)
        xhat = (x.double() - mean.view(shape)) * invstd.view(shape)
        out = xhat if weight is None else xhat * weight.double().view(shape)
        out = out if bias is None else out + bias.double().view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.total, ctx.group = total, group
        # Gradients take the dtype of what they are the gradient of: with bf16/fp16 input and
        # fp32 affine parameters (autocast, or a bf16 activation into an fp32 BatchNorm) the
        # weight/bias gradients stay fp32, as in nn.BatchNorm; rounding them to the input's
        # dtype cost 3-4 significant digits (weight-grad error up to 4e-2, torch's 6e-6).
        ctx.param_dtypes = (
            None if weight is None else weight.dtype,
            None if bias is None else bias.dtype,
        )
        return out.to(x.dtype)  # output in the input's dtype, like nn.BatchNorm

    @staticmethod
    def backward(ctx, dy):
        xhat, invstd, weight = ctx.saved_tensors
        shape = (1, -1) + (1,) * (dy.dim() - 2)
        dims = [0] + list(range(2, dy.dim()))  # every dim but the channels
        dy64 = dy.double()
        sum_dy = dy64.sum(dims)  # (C,) rank-local
        sum_dy_xhat = (dy64 * xhat).sum(dims)  # (C,) rank-local
        sums = comm.all_reduce(torch.cat([sum_dy, sum_dy_xhat]), group=ctx.group)  # (2C,)
        g_dy, g_dy_xhat = sums.split(sum_dy.numel())
        scale = invstd if weight is None else invstd * weight.double()
        dx = dy64 - (g_dy / ctx.total).view(shape) - xhat * (g_dy_xhat / ctx.total).view(shape)
        dx = dx * scale.view(shape)
        # weight/bias: this rank's own sums (DDP then averages them like any gradient), in
        # the parameters' dtype (float64 sums rounded once), not dy's
        w_dtype, b_dtype = ctx.param_dtypes
        d_weight = sum_dy_xhat.to(w_dtype) if ctx.needs_input_grad[1] else None
        d_bias = sum_dy.to(b_dtype) if ctx.needs_input_grad[2] else None
        return dx.to(dy.dtype), d_weight, d_bias, None, None, None


class SyncBatchNorm(_BatchNorm):
    """``torch.nn.SyncBatchNorm``'s interface; statistics over every rank of ``process_group``."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group=None,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        # bias=False (torch 2.13+: an affine weight without a bias) only where asked, so
        # older torch, whose BatchNorm has no such keyword, still builds the default
        extra = {} if bias else {"bias": False}
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, **extra
        )
        self.process_group = process_group

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(
                f"SyncBatchNorm: expected an input of 2 or more dims (N, C, ...); got "
                f"{x.dim()}-D of shape {tuple(x.shape)}. Hint: add a batch dim."
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(x)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        if not (bn_training and self.training and comm.get_world_size(self.process_group) > 1):
            return super().forward(x)  # eval, or one rank: plain BatchNorm, no communication
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, as in nn.BatchNorm
                momentum = 1.0 / float(self.num_batches_tracked)
        stats = _global_stats(x, self.process_group)
        if self.track_running_stats:
            mean, var, total = stats
            # Unbiased variance over the GLOBAL count, like torch. The float64 statistics are
            # rounded once, to the buffers' dtype (fp32 for a bf16/fp16 input into an fp32
            # module, as nn.BatchNorm keeps them), never through the input's dtype.
            with torch.no_grad():
                unbiased = var * total / max(total - 1, 1)
                buf = self.running_mean.dtype
                self.running_mean.mul_(1 - momentum).add_((momentum * mean).to(buf))
                self.running_var.mul_(1 - momentum).add_((momentum * unbiased).to(buf))
        return _SyncBatchNormFn.apply(
            x, self.weight, self.bias, self.eps, self.process_group, stats
        )

    @classmethod
    def convert_sync_batchnorm(cls, module: nn.Module, process_group=None) -> nn.Module:
        """Return ``module`` with every BatchNorm*d replaced by a ``SyncBatchNorm`` (same state)."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_group,
                device=module.running_mean.device if module.running_mean is not None else None,
            )
            if module.affine:
                with torch.no_grad():
                    out.weight, out.bias = module.weight, module.bias  # the same Parameters
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out
