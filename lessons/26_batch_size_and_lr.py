# %% [markdown]
# # Lesson 26 — batch size and learning rate: per-rank batch, the linear scaling rule, warm-up
#
# Run: `python lessons/26_batch_size_and_lr.py`
#
# With DDP each rank loads its own `batch_size` samples, and the gradients are *averaged*
# over the ranks. So W ranks with a per-rank batch B take the same step as one process
# with a batch of W·B: the **global batch** is W·B (part 1 checks it against torch's DDP).
#
# A bigger batch means fewer steps per epoch, each with a less noisy gradient of the same
# size. Keep the learning rate and an epoch moves the model W times less far: training is
# slower per sample. The **linear scaling rule** (Goyal et al., 2017, "Accurate, Large
# Minibatch SGD"): multiply the learning rate by k when the batch grows k times. It holds
# while the LR stays small enough; at the start of training the gradients are large and
# a scaled LR can overshoot, so **gradual warm-up** (the paper's §2.2) starts at the
# small-batch LR η and ramps linearly to kη over the first steps (the paper: 5 epochs) —
# at k = 32 from 0.05 up to 1.6, not from a fixed fraction of 1.6.
#
# Both are measured here on the baseline task. One run is deterministic (fixed seeds), so
# a single run's "better" or "worse" can be an accident of that seed: every setting runs
# over several seeds (model initialisation and training data), and the table shows the
# mean held-out loss and its spread.

# %%
import kit
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as TorchDDP

import minidp

WORLD, PER_RANK, DDP_STEPS = 2, 16, 3
N, B, LR = kit.pick(2048, 1024), 8, 0.05  # the small-batch baseline: batch 8, lr 0.05
WARM = 4  # warm-up steps
SEEDS = range(kit.pick(8, 4))  # each setting over these seeds: model init and data


def ddp_steps(rank: int, world: int) -> dict:
    """Per-rank batch PER_RANK through torch's DDP and minidp's, same data, same steps."""
    x, y = kit.make_data(DDP_STEPS * PER_RANK * world)
    batches = kit.batches(x, y, PER_RANK * world)  # global batches; each rank takes its part
    out = {}
    for name, wrap in (("torch", TorchDDP), ("minidp", minidp.DistributedDataParallel)):
        ddp = wrap(kit.make_model())
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        for xb, yb in batches:
            opt.zero_grad()
            mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)  # this rank's PER_RANK samples
            nn.functional.cross_entropy(ddp(xb[mine]), yb[mine]).backward()
            opt.step()
        out[name] = ddp.module
    return out


def warmup_factor(step: int, warm: int, k: int) -> float:
    """Goyal et al.'s gradual warm-up, as a factor of the scaled LR kη: 1/k (η itself) at
    step 0, rising linearly to 1 (kη) at step warm-1, then 1."""
    if warm <= 1:
        return 1.0
    return 1 / k + (1 - 1 / k) * min(1.0, step / (warm - 1))


def train(batch: int, lr: float, warm: int = 0, k: int = 1, seed: int = 0) -> float:
    """One epoch of N samples at this batch and LR (warm-up over ``warm`` steps from lr/k);
    the loss on 1024 held-out samples after it."""
    x, y = kit.make_data(N, seed=100 + seed)
    model = kit.make_model(seed=seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step, (xb, yb) in enumerate(kit.batches(x, y, batch)):
        for group in opt.param_groups:
            group["lr"] = lr * (warmup_factor(step, warm, k) if warm else 1.0)
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    xt, yt = kit.make_data(1024, seed=9)  # held out, the same for every run
    with torch.no_grad():
        return nn.functional.cross_entropy(model(xt), yt).item()


def over_seeds(*args, **kwargs) -> torch.Tensor:
    """``train`` once per seed: (len(SEEDS),) held-out losses."""
    return torch.tensor([train(*args, **kwargs, seed=s) for s in SEEDS])


# %% [markdown]
# ## 1. W ranks × batch B = one process with batch W·B
# Two rank processes, per-rank batch 16, through torch's DDP and minidp's; one process
# with batch 32 beside them.

# %%
if __name__ == "__main__":
    kit.title("Lesson 26: batch size and learning rate — global batch, linear scaling, warm-up")
    ranks = kit.spawn(ddp_steps, WORLD)
    single = kit.make_model()
    x, y = kit.make_data(DDP_STEPS * PER_RANK * WORLD)
    kit.train_single(single, kit.batches(x, y, PER_RANK * WORLD), lr=LR)
    print(f"{WORLD} ranks x per-rank batch {PER_RANK} = global batch {WORLD * PER_RANK}")

# %% [markdown]
# ## 2. Growing the batch k times: LR kept, LR scaled, LR scaled with warm-up
# One process stands in for k ranks (part 1). Every run sees the same N samples once;
# each cell is the **held-out loss** after that epoch (lower is better), mean ± standard
# deviation over the seeds.

# %%
if __name__ == "__main__":
    base = over_seeds(B, LR)
    print(f"baseline: batch {B}, lr {LR}: {N // B} steps, held-out loss "
          f"{base.mean():.4f} ± {base.std():.4f} over {len(SEEDS)} seeds")  # fmt: skip
    print(f"held-out loss after one epoch (mean ± std over {len(SEEDS)} seeds):")
    print(
        f"{'k':>3} {'batch':>6} {'steps':>6} {'lr kept':>16} {'lr x k':>16} {'x k + warm-up':>16}"
    )
    runs = {}
    for k in (8, 32):
        runs[k] = (
            over_seeds(B * k, LR),
            over_seeds(B * k, LR * k),
            over_seeds(B * k, LR * k, WARM, k),
        )
        cells = " ".join(f"{r.mean():>8.4f} ± {r.std():.3f}" for r in runs[k])
        print(f"{k:>3} {B * k:>6} {N // (B * k):>6} {cells}")
    for k, (_, scaled, warmed) in runs.items():
        helped = int((warmed < scaled).sum())
        print(f"k={k}: warm-up lowered the held-out loss in {helped} of {len(SEEDS)} seeds "
              f"(mean change {(warmed - scaled).mean():+.4f}); its {WARM} steps below kη are "
              f"{WARM} of the epoch's {N // (B * k)}")  # fmt: skip
    print(
        "\nThis small model does not blow up at kη, so warm-up has nothing to prevent here and\n"
        "costs progress (most at k=32, where it is a large part of a short epoch); it earns\n"
        "its keep on deep networks whose first steps at a large LR diverge."
    )

# %% [markdown]
# ## 3. Warm-up is torch's `LinearLR`
# `LinearLR(opt, start_factor=1/k, total_iters=warm-1)` produces the same LRs as
# `warmup_factor` above: η at the first step, kη from step warm-1 on.

# %%
if __name__ == "__main__":
    opt = torch.optim.SGD(kit.make_model().parameters(), lr=LR * 32)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / 32, total_iters=WARM - 1)
    torch_lrs = []
    for _ in range(WARM + 2):
        torch_lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    our_lrs = [LR * 32 * warmup_factor(s, WARM, 32) for s in range(WARM + 2)]
    print(f"warm-up LRs: {[round(v, 4) for v in our_lrs]}")

# %% [markdown]
# ## Checks
# Part 1: minidp's DDP against torch's bit for bit; both against one process up to float32
# rounding (splitting the batch changes the order of the sums; 3 steps, rtol 1e-4).

# %%
if __name__ == "__main__":
    for r, res in enumerate(ranks):
        kit.check(
            f"rank {r}: minidp DDP vs torch DDP, per-rank batch {PER_RANK}",
            res["minidp"],
            res["torch"],
        )
    kit.check(
        f"DDP {WORLD} x {PER_RANK} vs one process with batch {WORLD * PER_RANK}",
        ranks[0]["torch"],
        single,
        exact=False,
        rtol=1e-4,
        atol=1e-5,
    )
    kept8, scaled8 = runs[8][0].mean().item(), runs[8][1].mean().item()
    base_mean = base.mean().item()
    kit.check_true(
        "batch x8, LR kept: much worse than the baseline after the same samples (mean)",
        kept8 > base_mean + 0.3,
        f"{kept8:.4f} vs {base_mean:.4f}",
    )
    kit.check_true(
        "batch x8, LR x8: within 0.05 of the baseline (the linear scaling rule, mean)",
        abs(scaled8 - base_mean) < 0.05,
        f"{scaled8:.4f} vs {base_mean:.4f}",
    )
    kit.check_true(
        "batch x32, LR x32: further from the baseline than x8 (the rule's limit, mean)",
        runs[32][1].mean().item() - base_mean > scaled8 - base_mean,
        f"{runs[32][1].mean():.4f} vs {scaled8:.4f}",
    )
    kit.check_true(
        "gradual warm-up starts at the small-batch LR η and reaches kη (Goyal et al. §2.2)",
        abs(torch_lrs[0] - LR) < 1e-12 and abs(torch_lrs[WARM - 1] - 32 * LR) < 1e-12,
        f"torch LinearLR: {torch_lrs[0]:.4g} -> {torch_lrs[WARM - 1]:.4g}",
    )
    kit.check(
        "warm-up LRs vs torch's LinearLR",
        torch.tensor(our_lrs),
        torch.tensor(torch_lrs),
        exact=False,
    )
    kit.done()
