# %% [markdown]
# # Lesson 10 — DDP from scratch: gradient hooks and one all-reduce after backward
#
# Run: `python lessons/10_ddp_from_scratch.py`
#
# DistributedDataParallel is one process per device (lesson 5), each with a full copy of
# the model, each on its own slice of the batch. Three things keep the copies identical:
#
# 1. **same start**: rank 0's parameters are broadcast to everyone at construction;
# 2. **same gradient**: after backward, every rank's gradients are replaced by their
#    average over the ranks — one all-reduce (lesson 8);
# 3. **same update**: every rank then runs the same optimizer step on the same numbers.
#
# No parameter server, no model copy per step: only gradients travel. We build exactly
# that, step by step, on minidp.comm — gradient-ready hooks tell us *when* each gradient
# exists (lesson 11 will use that to start communicating early) — then compare with
# `torch.nn.parallel.DistributedDataParallel` and with `minidp.DistributedDataParallel`.
#
# 3 real rank processes; global batch 96 = 3 x 32.

# %%
import inspect

import kit
import torch
import torch.distributed as dist
from torch import nn

import minidp
from minidp.comm import broadcast, ring_all_reduce
from minidp.textbook import ddp as textbook

WORLD = 3
LOCAL_BATCH = 32
STEPS = kit.pick(12, 3)


def local_batches(rank: int, world: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's slice of each global batch (rows rank*32 .. rank*32+31)."""
    x, y = kit.make_data(STEPS * LOCAL_BATCH * world)
    glob = kit.batches(x, y, LOCAL_BATCH * world)
    return [(xb.chunk(world)[rank], yb.chunk(world)[rank]) for xb, yb in glob]


# %% [markdown]
# ## The teaching DDP, in four small functions


# %%
def same_start(model: nn.Module) -> None:
    """1. Everyone starts from rank 0's weights (broadcast every parameter)."""
    with torch.no_grad():
        for p in model.parameters():
            broadcast(p.data, src=0)


def watch_gradients(model: nn.Module, names: dict, ready: list) -> None:
    """2. A hook per parameter, called when its .grad has been accumulated."""
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda p: ready.append(names[p]))


def average_gradients(params: list[nn.Parameter], world: int) -> None:
    """3. ONE all-reduce: pack every gradient (scaled by 1/world) into one flat buffer."""
    flat = torch.cat([p.grad.reshape(-1) * (1.0 / world) for p in params])  # (numel,)
    ring_all_reduce(flat)  # sum over ranks; gloo-exact ring (lesson 8)
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
        offset += p.numel()


def train_teaching_ddp(rank: int, world: int, repack: bool = False) -> dict:
    model = kit.make_model(seed=100 + rank)  # deliberately different on every rank
    start = [p.detach().clone() for p in model.parameters()]  # this rank's own init
    same_start(model)
    synced = [p.detach().clone() for p in model.parameters()]  # after the broadcast
    names = {p: n for n, p in model.named_parameters()}
    by_name = dict(model.named_parameters())
    ready: list[str] = []
    watch_gradients(model, names, ready)
    params = list(model.parameters())  # forward order: the layout torch's first bucket uses
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (xb, yb) in enumerate(local_batches(rank, world)):
        opt.zero_grad()
        ready.clear()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        if step == 0 and not repack:
            kit.say0(rank, "gradients became ready in this order:", " -> ".join(ready))
        average_gradients(params, world)
        opt.step()
        if step == 0 and repack:  # torch's rule: from the 2nd step on, pack in ready order
            params = [by_name[n] for n in ready]
        if step % max(STEPS // 4, 1) == 0 and not repack:
            kit.say(rank, f"step {step}: local loss {loss.item():.4f}")
    return {
        "start": start,
        "synced": synced,
        "model": model,
    }


# %% [markdown]
# ## The official wrapper and minidp's, same data, same ranks


# %%
def train_wrapped(rank: int, world: int, wrapper) -> nn.Module:
    model = kit.make_model(seed=100 + rank)
    ddp = wrapper(model)  # broadcasts rank 0's weights, installs the hooks and buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for xb, yb in local_batches(rank, world):
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(xb), yb).backward()  # averaging happens in here
        opt.step()
    return model


def ddp_lesson(rank: int, world: int) -> dict:
    out = train_teaching_ddp(rank, world)
    out["repacked"] = train_teaching_ddp(rank, world, repack=True)["model"]
    out["torch"] = train_wrapped(rank, world, nn.parallel.DistributedDataParallel)
    out["minidp"] = train_wrapped(rank, world, minidp.DistributedDataParallel)
    out["textbook"] = train_wrapped(rank, world, textbook.DistributedDataParallel)
    dist.barrier()
    return out


# %% [markdown]
# ## The same ideas as a module: minidp's textbook DDP
# The four functions above, packaged the way DDP packages them: `same_start` in
# `__init__`, a hook per parameter, and instead of one all-reduce after backward, one per
# *bucket*, started from the hooks while backward still runs (lesson 11) — with the default
# 25 MiB cap this small model is a single bucket, i.e. exactly this lesson's schedule.
# minidp's own source (`inspect.getsource`), read it top to bottom:

# %%
if __name__ == "__main__":
    shown = inspect.getsource(textbook.DistributedDataParallel)
    print(shown)

# %% [markdown]
# What `minidp.DistributedDataParallel` (faithful to torch's reducer) adds: torch's bucket
# layout and its rebuild in the order gradients really arrived (which, with 3+ ranks,
# decides the bits), buffers broadcast every forward, `no_sync` (lesson 13),
# `find_unused_parameters` (lesson 14), comm hooks, `join`, `gradient_as_bucket_view`,
# and checks that turn a desynchronised model into an error instead of a hang.


# %%
if __name__ == "__main__":
    kit.title("Lesson 10: DDP from scratch — hooks, one all-reduce after backward")
    res = kit.spawn(ddp_lesson, WORLD)

# %% [markdown]
# ## Checks
# * every rank started from different random weights, held rank 0's after the broadcast,
#   and ended with the same bits;
# * the teaching DDP vs `torch.nn.parallel.DistributedDataParallel`. With 3 ranks the
#   bits depend on *where* each gradient sits in the flat buffer (it decides which ring
#   chunk it is in, hence the order of the additions). torch packs the first step in
#   parameter order and, from the second step, in the order gradients became ready —
#   our one-buffer version keeps parameter order, so it matches up to rounding only.
#   Repack the buffer in ready order from the second step (a one-line change) and it
#   matches bit for bit: the bits follow the layout, nothing else;
# * `minidp.DistributedDataParallel` reproduces torch's buckets: bit for bit;
# * all of them vs one device on the global batch of 96 (lesson 1's baseline).

# %%
if __name__ == "__main__":
    single = kit.make_model(seed=100)  # rank 0's start is everyone's start
    x, y = kit.make_data(STEPS * LOCAL_BATCH * WORLD)
    kit.train_single(single, kit.batches(x, y, LOCAL_BATCH * WORLD))

    kit.check_true(
        "ranks started from different weights (each rank's own init, before the broadcast)",
        all(
            any(not torch.equal(a, b) for a, b in zip(r["start"], res[0]["start"])) for r in res[1:]
        ),
    )
    kit.check(
        "after same_start every rank holds rank 0's starting weights",
        [r["synced"] for r in res],
        [res[0]["start"]] * WORLD,
    )
    for r in range(1, WORLD):
        kit.check(
            f"teaching DDP: rank {r} == rank 0 after training", res[r]["model"], res[0]["model"]
        )
    kit.check(
        "teaching DDP vs torch DDP (one flat buffer vs torch's bucket order)",
        res[0]["model"],
        res[0]["torch"],
        exact=False,
        rtol=1e-4,
        atol=1e-5,
    )
    kit.check(
        "teaching DDP repacked in ready order from step 2 vs torch DDP, every rank",
        [r["repacked"] for r in res],
        [r["torch"] for r in res],
    )
    for r in range(WORLD):
        kit.check(
            f"minidp.DistributedDataParallel vs torch DDP, rank {r}",
            res[r]["minidp"],
            res[r]["torch"],
        )
    for r in range(1, WORLD):
        kit.check(
            f"textbook DDP: rank {r} == rank 0 after training",
            res[r]["textbook"],
            res[0]["textbook"],
        )
    kit.check(
        "textbook DDP (one bucket, last layer first) vs torch DDP (other order: rounding only)",
        res[0]["textbook"],
        res[0]["torch"],
        exact=False,
        rtol=1e-5,
        atol=1e-6,
    )
    kit.check_true(
        "the class shown is minidp.textbook.ddp's own source, not a copy",
        textbook.DistributedDataParallel.__module__ == "minidp.textbook.ddp"
        and shown in inspect.getsource(textbook),
    )
    kit.check(
        "3 ranks x 32 vs one device x 96 (lesson 1 baseline)",
        res[0]["model"],
        single,
        exact=False,
        rtol=1e-4,
        atol=1e-5,
    )
    kit.done()

# %% [markdown]
# ## Your turn
# Average the gradients after backward yourself; the checker compares with torch DDP's:
# `python -m minidp exercise check average_gradients`.

# %%
if __name__ == "__main__":
    print("Exercise: python -m minidp exercise check average_gradients")
