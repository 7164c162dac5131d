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
# a scaled LR can overshoot, so **warm-up** ramps it up from lr/warm to lr over the first
# steps (the paper: 5 epochs). Both are measured here on the baseline task.

# %%
import kit
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as TorchDDP

import minidp

WORLD, PER_RANK, DDP_STEPS = 2, 16, 3
N, B, LR = kit.pick(2048, 1024), 8, 0.05  # the small-batch baseline: batch 8, lr 0.05
WARM = 4  # warm-up steps


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


def warmup_factor(step: int, warm: int) -> float:
    """Linear warm-up: lr/warm at step 0, the full lr from step warm-1 on."""
    return min(1.0, (step + 1) / warm) if warm else 1.0


def train(batch: int, lr: float, warm: int = 0) -> tuple[float, list[float]]:
    """One epoch of N samples at this batch and LR; the held-out loss and the curve."""
    x, y = kit.make_data(N, seed=2)
    model = kit.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    curve = []
    for step, (xb, yb) in enumerate(kit.batches(x, y, batch)):
        for group in opt.param_groups:
            group["lr"] = lr * warmup_factor(step, warm)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        curve.append(loss.item())
    xt, yt = kit.make_data(1024, seed=9)  # held out
    with torch.no_grad():
        return nn.functional.cross_entropy(model(xt), yt).item(), curve


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
# the held-out loss after the epoch is printed (lower is better).

# %%
if __name__ == "__main__":
    base, base_curve = train(B, LR)
    print(f"baseline: batch {B}, lr {LR}: {len(base_curve)} steps, held-out loss {base:.4f}")
    print(f"{'k':>3} {'batch':>6} {'steps':>6} {'lr kept':>9} {'lr x k':>9} {'x k + warm-up':>14}")
    runs, curves = {}, {"baseline": base_curve}
    for k in (8, 32):
        kept, curves[f"x{k}, lr kept"] = train(B * k, LR)
        scaled, curves[f"x{k}, lr x{k}"] = train(B * k, LR * k)
        warmed, curves[f"x{k}, lr x{k} + warm-up"] = train(B * k, LR * k, WARM)
        runs[k] = (kept, scaled, warmed)
        print(f"{k:>3} {B * k:>6} {N // (B * k):>6} {kept:>9.4f} {scaled:>9.4f} {warmed:>14.4f}")
    print("\ntraining loss after 1/4, 1/2, 3/4 and all of the samples:")
    for name, curve in curves.items():
        at = [curve[max(0, len(curve) * q // 4 - 1)] for q in (1, 2, 3, 4)]
        print(f"{name:>24}: " + "  ".join(f"{v:.3f}" for v in at))
    print(
        "\nThis small model does not blow up at these LRs, so warm-up mostly delays progress\n"
        "(on this machine it helped at k=32 with N=2048 and hurt with N=1024); it earns its\n"
        "keep on deep networks whose first steps at a large LR diverge."
    )

# %% [markdown]
# ## 3. Warm-up is torch's `LinearLR`
# `LinearLR(opt, start_factor=1/warm, total_iters=warm-1)` produces the same LRs as the
# one-line `warmup_factor` above.

# %%
if __name__ == "__main__":
    opt = torch.optim.SGD(kit.make_model().parameters(), lr=LR * 32)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / WARM, total_iters=WARM - 1)
    torch_lrs = []
    for _ in range(WARM + 2):
        torch_lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    our_lrs = [LR * 32 * warmup_factor(s, WARM) for s in range(WARM + 2)]
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
    kept8, scaled8, _ = runs[8]
    kit.check_true(
        "batch x8, LR kept: much worse than the baseline after the same samples",
        kept8 > base + 0.3,
        f"{kept8:.4f} vs {base:.4f}",
    )
    kit.check_true(
        "batch x8, LR x8: within 0.05 of the baseline (the linear scaling rule)",
        abs(scaled8 - base) < 0.05,
        f"{scaled8:.4f} vs {base:.4f}",
    )
    kit.check_true(
        "batch x32, LR x32: further from the baseline than x8 (the rule's limit)",
        runs[32][1] - base > scaled8 - base,
        f"{runs[32][1]:.4f} vs {scaled8:.4f}",
    )
    kit.check(
        "warm-up LRs vs torch's LinearLR",
        torch.tensor(our_lrs),
        torch.tensor(torch_lrs),
        exact=False,
    )
    kit.done()
