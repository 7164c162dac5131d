# %% [markdown]
# # Lesson 13 — gradient accumulation and `no_sync`
#
# Run: `python lessons/13_no_sync_accumulation.py`
#
# Gradient accumulation: run K micro-batches forward and backward, let `.grad` add up,
# step the optimizer once — a K-times larger batch in the memory of one. Divide each
# micro-batch's loss by K so the sum is a mean.
#
# Under DDP every backward all-reduces, so accumulation would communicate K times per
# step although only the last sum matters. `with ddp.no_sync():` turns the all-reduce off
# for the backwards of the forwards run **inside** it: DDP decides at *forward* time
# whether the coming backward synchronises. Three ways to write the loop, measured by
# counting all-reduces with a comm hook (the same counting hook on torch's DDP):
#
# * **plain**: no `no_sync` — K all-reduces per step;
# * **right**: forward and backward of the first K-1 micro-batches inside `no_sync`, the
#   last outside — 1 all-reduce per step;
# * **broken A**: only `backward()` inside `no_sync` — the forward already armed the
#   all-reduce: still K per step (same result, K times the communication);
# * **broken B**: every forward inside `no_sync`, only the last backward outside — no
#   all-reduce at all: the ranks silently drift apart.

# %%
import contextlib

import kit
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as torch_hooks

import minidp
from minidp.ddp import allreduce_hook as minidp_allreduce_hook

WORLD, K, MICRO = 2, 4, 16  # 2 ranks, 4 micro-batches of 16 per optimizer step
STEPS = kit.pick(5, 2)
# %% [markdown]
# ## The data: each rank's K micro-batches per optimizer step


# %%
def micro_batches(rank: int, world: int) -> list[list[tuple]]:
    """Per step, this rank's K micro-batches (its slice of a global batch of K*MICRO*world)."""
    x, y = kit.make_data(STEPS * K * MICRO * world)
    steps = []
    for xb, yb in kit.batches(x, y, K * MICRO * world):
        mine_x, mine_y = xb.chunk(world)[rank], yb.chunk(world)[rank]
        steps.append(list(zip(mine_x.chunk(K), mine_y.chunk(K))))
    return steps


def micro_loss(ddp, xb, yb) -> torch.Tensor:
    return nn.functional.cross_entropy(ddp(xb), yb) / K  # / K: the K losses add up to a mean


# %% [markdown]
# ## Four ways to run one micro-batch
# `last` is True for the K-th micro-batch of the step. **plain**: no `no_sync` at all.


# %%
def plain(ddp, xb, yb, last: bool) -> None:
    micro_loss(ddp, xb, yb).backward()


# %% [markdown]
# **right**: forward AND backward inside `no_sync`, except for the last micro-batch.


# %%
def right(ddp, xb, yb, last: bool) -> None:
    with ddp.no_sync() if not last else contextlib.nullcontext():
        micro_loss(ddp, xb, yb).backward()


# %% [markdown]
# **broken A**: only `backward()` inside `no_sync` — the forward outside already armed
# the all-reduce.


# %%
def broken_a(ddp, xb, yb, last: bool) -> None:
    loss = micro_loss(ddp, xb, yb)  # forward outside
    with ddp.no_sync() if not last else contextlib.nullcontext():
        loss.backward()


# %% [markdown]
# **broken B**: every forward inside `no_sync`, only the last backward outside — none of
# the backwards was armed.


# %%
def broken_b(ddp, xb, yb, last: bool) -> None:
    with ddp.no_sync():
        loss = micro_loss(ddp, xb, yb)
    loss.backward()


VARIANTS = {"plain": plain, "right": right, "broken A": broken_a, "broken B": broken_b}


# %% [markdown]
# ## Training, with every all-reduce counted by a comm hook (minidp's and torch's)


# %%
def train(rank: int, world: int, wrapper, hook, variant: str) -> tuple[nn.Module, int]:
    model = kit.make_model(seed=0)
    ddp = wrapper(model)
    calls = [0]

    def counting(state, bucket):  # count, then do the ordinary all-reduce hook
        calls[0] += 1
        return hook(state, bucket)

    ddp.register_comm_hook(None, counting)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for micro in micro_batches(rank, world):
        opt.zero_grad()
        for i, (xb, yb) in enumerate(micro):
            VARIANTS[variant](ddp, xb, yb, last=i == K - 1)
        opt.step()
    return model, calls[0]


# %% [markdown]
# ## Run every variant on 2 real ranks, minidp and torch side by side


# %%
def accumulation_lesson(rank: int, world: int) -> dict:
    out = {}
    for variant in VARIANTS:
        mine, n_mine = train(
            rank, world, minidp.DistributedDataParallel, minidp_allreduce_hook, variant
        )
        ref, n_ref = train(
            rank, world, nn.parallel.DistributedDataParallel, torch_hooks.allreduce_hook, variant
        )
        out[variant] = {"minidp": mine, "torch": ref, "calls": (n_mine, n_ref)}
        kit.say0(rank, f"{variant:<9}: {n_mine} all-reduces in {STEPS} steps (torch DDP: {n_ref})")
    dist.barrier()
    return out


if __name__ == "__main__":
    kit.title("Lesson 13: gradient accumulation and no_sync")
    print(
        f"{WORLD} ranks x {K} micro-batches of {MICRO} per step = global batch {WORLD * K * MICRO}"
    )
    res = kit.spawn(accumulation_lesson, WORLD)

# %% [markdown]
# ## Checks
# * all-reduce counts: plain K per step, right 1, broken A K, broken B 0 — the same for
#   minidp and torch;
# * each variant: minidp vs torch DDP bit for bit (same hook on both);
# * plain, right and broken A: the same training as one device on the global batch
#   (up to rounding); broken B: the two ranks end with different models.

# %%
if __name__ == "__main__":
    single = kit.make_model(seed=0)
    x, y = kit.make_data(STEPS * K * MICRO * WORLD)
    kit.train_single(single, kit.batches(x, y, K * MICRO * WORLD))
    expected = {"plain": K * STEPS, "right": STEPS, "broken A": K * STEPS, "broken B": 0}
    for variant in VARIANTS:
        calls = res[0][variant]["calls"]
        kit.check_true(
            f"{variant}: {expected[variant]} all-reduces in {STEPS} steps (minidp, torch)",
            calls == (expected[variant], expected[variant]),
            str(calls),
        )
        kit.check(
            f"{variant}: minidp vs torch DDP, both ranks",
            [r[variant]["minidp"] for r in res],
            [r[variant]["torch"] for r in res],
        )
    for variant in ("plain", "right", "broken A"):
        kit.check(
            f"{variant}: vs one device on the global batch",
            res[0][variant]["minidp"],
            single,
            exact=False,
            rtol=1e-4,
            atol=1e-5,
        )
    drift = max(
        (a - b).abs().max().item()
        for a, b in zip(
            res[0]["broken B"]["minidp"].parameters(), res[1]["broken B"]["minidp"].parameters()
        )
    )
    kit.check_true(
        "broken B: the ranks' models drifted apart",
        drift > 1e-4,
        f"max |rank 0 - rank 1| = {drift:.3g}",
    )
    kit.done()

# %% [markdown]
# ## Your turn
# Accumulate over micro-batches with `no_sync` yourself; the checker counts the all-reduces
# and compares the gradients with torch DDP's:
# `python -m minidp exercise check no_sync_accumulation`.

# %%
if __name__ == "__main__":
    print("Exercise: python -m minidp exercise check no_sync_accumulation")
