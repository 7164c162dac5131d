# %% [markdown]
# # Lesson 24 — BatchNorm under data parallelism, and SyncBatchNorm
#
# Run: `python lessons/24_sync_batchnorm.py`
#
# BatchNorm normalises with the mean and variance *of the batch it sees*. Under DP or DDP
# each device sees only its slice: with 2 ranks, each BatchNorm layer normalises with the
# statistics of half the batch. Every other layer computes the same function whatever the
# split; BatchNorm does not. This lesson measures the difference, then fixes it with
# `minidp.SyncBatchNorm`, which gathers every rank's count, mean and spread so that each
# rank normalises with the global batch's statistics. torch's `nn.SyncBatchNorm` does the
# same with CUDA kernels — and refuses CPU tensors, so minidp's runs on minidp's own
# collectives instead.
#
# Ranks are threads with real gloo groups (`minidp.launch.run_threads`), each wrapping the
# model in `minidp.DistributedDataParallel`.

# %%
import copy
import inspect

import kit
import torch
from torch import nn

import minidp
from minidp.comm import count_traffic
from minidp.launch import run_threads

BATCH, STEPS, WORLD = kit.pick(64, 16), kit.pick(5, 3), 2


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 4))


def data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = kit.make_data(STEPS * BATCH)
    x[: BATCH // 2] += 2.0  # rank 0's first half-batch is shifted: the slices differ
    return list(kit.batches(x, y, BATCH))


def train(rank: int, world: int, model: nn.Module, batches: list) -> nn.Module:
    ddp = minidp.DistributedDataParallel(copy.deepcopy(model))  # threads share memory: a copy each
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for xb, yb in batches:
        opt.zero_grad()
        xs, ys = xb.chunk(world)[rank], yb.chunk(world)[rank]  # this rank's half
        nn.functional.cross_entropy(ddp(xs), ys).backward()
        opt.step()
    return ddp.module


# %% [markdown]
# ## 1. Plain BatchNorm under DDP: each rank normalises with its own half
# One process on the full batch is the model we want. DDP with plain BatchNorm trains
# something else: each rank's statistics come from its half (and DDP broadcasts rank 0's
# running statistics every forward, so rank 1's are simply overwritten).

# %%
if __name__ == "__main__":
    kit.title("Lesson 24: BatchNorm under data parallelism, and SyncBatchNorm")
    batches = data()
    single = make_model()
    opt = torch.optim.SGD(single.parameters(), lr=0.1)
    for xb, yb in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(single(xb), yb).backward()
        opt.step()
    plain = run_threads(train, WORLD, make_model(), batches)[0]
    gap = max((a - b).abs().max().item() for a, b in zip(plain.parameters(), single.parameters()))
    bn_gap = (plain[1].running_mean - single[1].running_mean).abs().max().item()
    print(f"plain BatchNorm under DDP vs one process: max parameter difference {gap:.3g}")
    print(f"running_mean differs by up to {bn_gap:.3g}: rank 0's half-batch statistics")

# %% [markdown]
# ## 2. torch's SyncBatchNorm needs a GPU
# In one process it quietly acts as a plain BatchNorm; with a real group of 2 ranks
# (processes, gloo) it refuses CPU tensors.


# %%
def torch_sync_bn_on_cpu(rank: int, world: int) -> str:
    try:
        nn.SyncBatchNorm(4).train()(torch.randn(8, 4))
    except (ValueError, RuntimeError) as exc:
        return str(exc).splitlines()[0]
    return ""


if __name__ == "__main__":
    refused = kit.spawn(torch_sync_bn_on_cpu, WORLD)[0]
    print(f"torch.nn.SyncBatchNorm on CPU, 2 ranks: {refused or 'accepted'}")

# %% [markdown]
# ## 3. minidp.SyncBatchNorm: the statistics of the whole batch on every rank
# `convert_sync_batchnorm` swaps every BatchNorm for a SyncBatchNorm with the same
# parameters and buffers, like torch's. Its forward gathers (count, mean, squared
# deviations) from every rank and combines them exactly:

# %%
if __name__ == "__main__":
    from minidp.nn.sync_batchnorm import _global_stats, _SyncBatchNormFn

    print(inspect.getsource(_global_stats))
    before = make_model()[1]
    synced = minidp.SyncBatchNorm.convert_sync_batchnorm(make_model())
    print(f"converted: {before!r} ({type(before).__name__}) -> {type(synced[1]).__name__}")
    trained = run_threads(train, WORLD, synced, batches)

# %% [markdown]
# ## 4. The backward, the running variance, and the cost
# Each output depends on the *global* mean and variance, so each input's gradient depends
# on every rank's `dy` too: `dx = (dy - Σdy/N - x̂·Σ(dy·x̂)/N) · γ/σ`, with both sums over
# the global batch of N. The backward all-reduces the two per-channel sums Σdy and
# Σdy·x̂ (x̂ = (x−μ)/σ), one collective of 2C numbers. The running variance is updated
# with the *unbiased* global variance, `var · N/(N−1)` with the global N — what one
# process on the whole batch computes.
#
# The price: per BatchNorm layer and step, one all-gather in forward and one all-reduce in
# backward, each blocking the training thread: unlike DDP's bucket all-reduces, nothing
# overlaps them. Below, one step of two ranks: each rank's input gradient against one
# process on the full batch, and the bytes the training thread itself sent.

# %%
if __name__ == "__main__":
    print(inspect.getsource(_SyncBatchNormFn.backward))


def one_bn_step(rank: int, world: int, bn: nn.Module, x: torch.Tensor, w: torch.Tensor) -> dict:
    """Forward and backward of this rank's half through a copy of ``bn``; what it sent."""
    bn = copy.deepcopy(bn)
    xs = x.chunk(world)[rank].clone().requires_grad_(True)  # (B/world, C) rank-local
    with count_traffic() as fwd:
        out = bn(xs)
    with count_traffic() as bwd:
        (out * w.chunk(world)[rank]).sum().backward()
    return {"dx": xs.grad, "forward": fwd.sent_bytes, "backward": bwd.sent_bytes}


if __name__ == "__main__":
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(BATCH, 32, generator=g), torch.randn(BATCH, 32, generator=g)
    x[: BATCH // 2] += 2.0  # the halves differ, as above
    full = x.clone().requires_grad_(True)
    (nn.BatchNorm1d(32)(full) * w).sum().backward()  # one process, the whole batch
    sync_bn = minidp.SyncBatchNorm.convert_sync_batchnorm(nn.BatchNorm1d(32))
    steps = run_threads(one_bn_step, WORLD, sync_bn, x, w)
    plain_steps = run_threads(one_bn_step, WORLD, nn.BatchNorm1d(32), x, w)
    for r, st in enumerate(steps):
        print(f"rank {r}: sent {st['forward']} B in forward, {st['backward']} B in backward "
              "(on the training thread)")  # fmt: skip
    off = (plain_steps[0]["dx"] - full.grad.chunk(WORLD)[0]).abs().max().item()
    print(f"plain BatchNorm's input gradient, rank 0: off by up to {off:.3g}")

# %% [markdown]
# ## Checks
# SyncBatchNorm under DDP trains the one-process model: same parameters and running
# statistics up to float32 rounding (the batch is split, so the matmuls and reductions
# add up in another order — not bit for bit). Plain BatchNorm does not.

# %%
if __name__ == "__main__":
    kit.check(
        "DDP + minidp.SyncBatchNorm vs one process on the full batch (parameters)",
        list(trained[0].parameters()),
        list(single.parameters()),
        exact=False,
        rtol=1e-5,
        atol=1e-6,
    )
    for r, model in enumerate(trained):
        kit.check(
            f"rank {r}'s running statistics vs one process",
            [model[1].running_mean, model[1].running_var],
            [single[1].running_mean, single[1].running_var],
            exact=False,
            rtol=1e-5,
            atol=1e-6,
        )
    kit.check_true("plain BatchNorm under DDP is measurably different", gap > 1e-3, f"{gap:.3g}")
    kit.check_true(
        "convert_sync_batchnorm replaced a BatchNorm1d with a SyncBatchNorm",
        type(before) is nn.BatchNorm1d and type(synced[1]) is minidp.SyncBatchNorm,
        f"{type(before).__name__} -> {type(synced[1]).__name__}",
    )
    kit.check(
        "SyncBatchNorm backward: each rank's input gradient vs one process on the full batch",
        [st["dx"] for st in steps],
        list(full.grad.chunk(WORLD)),
        exact=False,
        rtol=1e-5,
        atol=1e-6,
    )
    kit.check_true(
        "SyncBatchNorm communicates in forward and in backward, on the training thread",
        all(st["forward"] > 0 and st["backward"] > 0 for st in steps)
        and all(st["forward"] == st["backward"] == 0 for st in plain_steps),
        str([(st["forward"], st["backward"]) for st in steps]),
    )
    kit.check_true("torch's SyncBatchNorm refuses CPU tensors", bool(refused), refused)
    kit.done()
    print(
        "Exercise: SyncBatchNorm's global statistics yourself — python -m minidp exercise check sync_batchnorm_stats"
    )
