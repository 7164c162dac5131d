"""SyncBatchNorm: BatchNorm whose batch statistics span every rank, on minidp's collectives.

Each rank's BatchNorm sees only its slice of the batch; this one combines every rank's
count, mean and squared deviations (Chan's formula, in float64) into the whole batch's
statistics, as ``nn.BatchNorm`` on the full batch (torch's refuses CPU tensors). A rank
whose batch is empty takes part with a count of 0, as torch's does.

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
    if sum(counts) <= 1:  # a rank may be empty (its zeros weigh nothing), not the whole batch
        raise ValueError(
            f"SyncBatchNorm: Expected more than 1 value per channel when training, got "
            f"{sum(counts)} over every rank (counts {counts}, rank -> N * spatial). Hint: "
            "train with batches of 2 or more samples in all, or run eval mode."
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
        ctx.param_dtypes = (  # each gradient in its tensor's dtype (fp32 weight: fp32 grad)
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
        # weight/bias: this rank's own sums (DDP averages them), rounded once to their dtype
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
        # bias=False (torch 2.13+) only where asked: older torch's BatchNorm lacks the keyword
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
        if not (self.training and comm.get_world_size(self.process_group) > 1):
            return super().forward(x)  # eval, or one rank: plain BatchNorm, no communication
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average, as in nn.BatchNorm
                momentum = 1.0 / float(self.num_batches_tracked)
        stats = _global_stats(x, self.process_group)
        if self.track_running_stats:
            mean, var, total = stats
            # unbiased variance over the GLOBAL count (as torch), rounded once to the buffers' dtype
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
                out.weight, out.bias = module.weight, module.bias  # the same Parameters
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out
