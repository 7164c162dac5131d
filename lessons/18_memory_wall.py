# %% [markdown]
# # Lesson 18 — The memory wall: what every DDP rank holds, measured
#
# Run: `python lessons/18_memory_wall.py`
#
# DDP copies the whole model to every rank — and not only the weights. After a step with
# AdamW, each rank holds the parameters, their gradients, and two moments per parameter:
# 4 + 4 + 8 = 16 bytes per parameter in fp32 (the ZeRO paper's mixed precision gets the
# same 16: 2 + 2 + 12 with an fp32 master copy; FSDP2's bf16 policy keeps 4 + 4 + 8 with
# fp32 shards, lesson 22). DDP adds its own: the reducer
# all-reduces the gradients in flat **buckets**, and with torch's default
# `gradient_as_bucket_view=False` those buckets are a second full copy of the gradients
# (lesson 16): **20 bytes per parameter** on every DDP rank, 4Ψ more than the paper's
# table, which leaves them out. `gradient_as_bucket_view=True` makes each `.grad` a view
# into its bucket and gives those 4Ψ back.
#
# This lesson reads those bytes off the real tensors of a DDP run, compares them with one
# torch process training alone and with torch's own DDP buckets, and with the ZeRO
# paper's formulas for the sharded stages that lessons 19–23 build.
#
# Ranks are threads with real gloo groups (`minidp.launch.run_threads`).
#
# Memory is what sharding saves; time and bytes are what it costs. How both grow with the
# model, from 1 to 64 M parameters, for DDP, ZeRO-1/2 and FSDP beside torch's own:
# `diagrams/scaling.png`, drawn by `python -m minidp bench scaling` from real runs.

# %%
import copy

import kit
import torch
import torch.distributed as dist
from torch import nn

import minidp
from minidp.launch import run_threads
from minidp.tools.planner import plan
from minidp.tools.planner.memory import measure, storage_bytes
from minidp.tools.planner.stages import step_and_measure, train_step

WIDTH = kit.pick(256, 64)


STAGES = ("ddp", "zero1", "zero2")


def make_model() -> nn.Module:
    torch.manual_seed(0)
    layers = [m for _ in range(4) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10))


def every_stage(rank: int, world: int, model: nn.Module) -> dict:
    """One real AdamW step per stage on this rank; the bytes it left behind."""
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(8, WIDTH, generator=g), torch.randint(0, 10, (8,), generator=g)
    loss = nn.functional.cross_entropy
    out = {s: step_and_measure(s, model, x, y, loss, torch.optim.AdamW, lr=1e-3) for s in STAGES}
    # DDP again, each .grad a view into its bucket: the buckets are the gradients
    ddp = minidp.DistributedDataParallel(copy.deepcopy(model), gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    train_step(ddp, opt, x, y, loss)
    out["ddp, bucket view"] = measure(ddp, opt)
    return out


def torch_buckets(model: nn.Module, as_view: bool) -> tuple[int, bool]:
    """torch DDP's flat buckets on a 1-rank gloo group, read by a comm hook: (bytes of
    the distinct bucket storages, whether every .grad lives in one of them)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        # torch's DDP is freed when read_buckets returns, before the group is destroyed:
        # the other way round, freeing DDP frees the group, which waits for gloo's thread
        # while holding the GIL that thread needs to drop its last work (a deadlock that
        # hung 2 runs of this lesson in 15, torch 2.13).
        return read_buckets(model, as_view)
    finally:
        dist.destroy_process_group()


def read_buckets(model: nn.Module, as_view: bool) -> tuple[int, bool]:
    """torch_buckets' work, on the group it made."""
    ddp = nn.parallel.DistributedDataParallel(copy.deepcopy(model), gradient_as_bucket_view=as_view)
    buffers = {}  # storage pointer -> bytes; torch's buckets live in C++ otherwise

    def hook(state, bucket):  # sees each bucket's flat buffer, then all-reduces it
        buffers[bucket.buffer().untyped_storage().data_ptr()] = bucket.buffer().nbytes
        return (
            dist.all_reduce(bucket.buffer(), async_op=True)
            .get_future()
            .then(lambda fut: fut.value()[0])
        )

    ddp.register_comm_hook(None, hook)
    for _ in range(2):  # the second step runs on the rebuilt buckets, as training does
        buffers.clear()  # the first step's buckets are freed at the rebuild
        ddp.zero_grad()
        nn.functional.cross_entropy(
            ddp(torch.randn(8, WIDTH)), torch.randint(0, 10, (8,))
        ).backward()
    inside = all(p.grad.untyped_storage().data_ptr() in buffers for p in ddp.parameters())
    return sum(buffers.values()), inside


# %% [markdown]
# ## 1. One process with torch's AdamW: the bytes of a replica
# `measure` adds up the distinct storages behind the parameters, their `.grad`, and the
# optimizer's state (`exp_avg`, `exp_avg_sq`, and a 4-byte `step` counter per tensor).

# %%
if __name__ == "__main__":
    kit.title("Lesson 18: the memory wall — what every DDP rank holds")
    model = make_model()
    numel = sum(p.numel() for p in model.parameters())
    alone = make_model()
    opt = torch.optim.AdamW(alone.parameters(), lr=1e-3)
    nn.functional.cross_entropy(alone(torch.randn(8, WIDTH)), torch.randint(0, 10, (8,))).backward()
    opt.step()
    single = measure(alone, opt)
    moments = [opt.state[p][k] for p in alone.parameters() for k in ("exp_avg", "exp_avg_sq")]
    print(f"model: {numel} parameters (Ψ); one process after one AdamW step holds")
    print(f"  weights {single.params} B, grads {single.grads} B, optimizer {single.optimizer} B")
    print(f"  = {single.total / numel:.2f} bytes per parameter (16 + the step counters)")

# %% [markdown]
# ## 2. torch's DDP: the buckets
# torch keeps its buckets in C++; a comm hook receives each one (`bucket.buffer()`), so it
# can read their bytes, and whether the parameters' `.grad` live inside them:

# %%
if __name__ == "__main__":
    torch_copy, torch_copy_inside = torch_buckets(model, as_view=False)
    torch_view, torch_view_inside = torch_buckets(model, as_view=True)
    print(f"  torch DDP buckets: {torch_copy} B = {torch_copy / numel:.0f} B per parameter")
    print(f"  .grad inside the buckets: {torch_copy_inside} by default, {torch_view_inside} "
          "with gradient_as_bucket_view=True")  # fmt: skip

# %% [markdown]
# ## 3. DDP on 2 and 4 ranks: every rank holds all of it, and its buckets
# Each rank's bytes, after one real step of `minidp.DistributedDataParallel` + AdamW
# (weights + grads + buckets + optimizer), then with `gradient_as_bucket_view=True`:

# %%
if __name__ == "__main__":
    runs = {w: run_threads(every_stage, w, model) for w in (2, 4)}  # all stages, used below
    ddp = {w: [r["ddp"] for r in results] for w, results in runs.items()}
    for w, usages in ddp.items():
        for r, u in enumerate(usages):
            print(f"  W={w} rank {r}: {u.params} + {u.grads} + {u.buckets} + {u.optimizer} = "
                  f"{u.total} B ({u.total / numel:.2f} B/param)")  # fmt: skip
    view = [r["ddp, bucket view"] for r in runs[2]]
    print(f"  gradient_as_bucket_view=True: {view[0].total} B per rank "
          f"({view[0].total / numel:.2f} B/param): {ddp[2][0].total - view[0].total} B saved")  # fmt: skip
    print(f"  all ranks together at W=4: {sum(u.total for u in ddp[4])} B for one model's state")

# %% [markdown]
# ## 4. The ZeRO paper's answer, measured the same way
# ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too, FSDP (ZeRO-3) the weights as
# well. The same one-step measurement for minidp's ZeRO-1 and ZeRO-2 (lessons 19, 20),
# beside the formulas with p = g = 4 and K = 8 (fp32 AdamW), plus DDP's buckets (b = 4)
# where a DDP runs underneath: ZeRO-1 keeps DDP's all-reduce, and so its buckets; ZeRO-2
# reduce-scatters into shards and keeps no full-size bucket.

# %%
if __name__ == "__main__":
    rows = {}
    print(
        f"{'stage':<18}{'W':>3}{'max B/rank':>12}{'mean B/rank':>13}{'formula B':>11}   formula (b: DDP's buckets)"
    )
    formulas = {"ddp": "(4+4+4b+8)Ψ", "zero1": "4Ψ+4Ψ+4bΨ+8Ψ/N", "zero2": "4Ψ+(4+8)Ψ/N"}
    for stage in STAGES:
        for w in (2, 4):
            totals = [r[stage].total for r in runs[w]]
            formula = sum(plan.stage_bytes(stage, numel, w, 4, 4, 8))
            formula += plan.bucket_bytes(stage, numel, 4)  # DDP's buckets: 4Ψ or nothing
            rows[stage, w] = (max(totals), sum(totals) / w, formula)
            print(
                f"{plan.STAGE_NAMES[stage]:<18}{w:>3}{max(totals):>12}{sum(totals) / w:>13.0f}"
                f"{formula:>11.0f}   {formulas[stage]}"
            )
    print("(mean - formula: AdamW's 4-byte step counters and ZeRO-2's padding; max - mean:")
    print(" ZeRO-1 owns whole parameters, so one big tensor unbalances the ranks.)")
    print("The planner for real models: python -m minidp memory --help")

# %% [markdown]
# ## Checks
# Every DDP rank holds what one torch AdamW process holds, plus buckets of exactly the
# bytes torch's own DDP allocates; with `gradient_as_bucket_view=True` the gradients live
# in the buckets (torch's too) and a rank holds just what one process holds; each stage's
# mean per rank is within 1% of its formula (buckets included), below DDP's.

# %%
if __name__ == "__main__":
    for w, usages in ddp.items():
        for r, u in enumerate(usages):
            kit.check_true(
                f"W={w} rank {r} holds one torch AdamW process + torch DDP's bucket bytes",
                (u.params, u.grads, u.optimizer) == (single.params, single.grads, single.optimizer)
                and u.total == single.total + torch_copy,
                f"{u.total} B vs {single.total} + {torch_copy} B",
            )
    kit.check_true(
        "torch DDP's buckets are a second gradient-sized copy (a separate storage)",
        torch_copy == storage_bytes(p.grad for p in alone.parameters()) and not torch_copy_inside,
        f"{torch_copy} B",
    )
    kit.check_true(
        "gradient_as_bucket_view=True: torch's .grad live in its buckets, minidp's rank holds "
        "one process's bytes",
        torch_view_inside and all(u.total == single.total and u.buckets == 0 for u in view),
        f"{view[0].total} vs {single.total} B",
    )
    for (stage, w), (_, mean, formula) in rows.items():
        kit.check_true(
            f"{stage} at W={w}: mean bytes per rank within 1% of the formula",
            abs(mean - formula) <= 0.01 * formula,
            f"{mean:.0f} vs {formula:.0f}",
        )
    kit.check_true(
        "ZeRO-2 < ZeRO-1 < DDP at W=4 (largest rank)",
        rows["zero2", 4][0] < rows["zero1", 4][0] < rows["ddp", 4][0],
    )
    kit.done()
