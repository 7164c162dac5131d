# %% [markdown]
# # Lesson 18 — The memory wall: what every DDP rank holds, measured
#
# Run: `python lessons/18_memory_wall.py`
#
# DDP copies the whole model to every rank — and not only the weights. After a step with
# AdamW, each rank holds the parameters, their gradients, and two moments per parameter:
# 4 + 4 + 8 = 16 bytes per parameter in fp32 (the ZeRO paper's mixed precision gets the
# same 16: 2 + 2 + 12 with an fp32 master copy). This lesson reads those bytes off the
# real tensors of a DDP run, compares them with one torch process training alone (every
# rank is a full replica of it), and with the ZeRO paper's formulas for the sharded
# stages that lessons 19–23 build.
#
# Ranks are threads with real gloo groups (`minidp.launch.run_threads`).

# %%
import kit
import torch
from torch import nn

from minidp.launch import run_threads
from minidp.zero import plan
from minidp.zero.memory import measure, storage_bytes
from minidp.zero.stages import step_and_measure

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
    return {s: step_and_measure(s, model, x, y, loss, torch.optim.AdamW, lr=1e-3) for s in STAGES}


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
# ## 2. DDP on 2 and 4 ranks: every rank holds all of it
# Each rank's bytes, after one real step of `minidp.DistributedDataParallel` + AdamW:

# %%
if __name__ == "__main__":
    runs = {w: run_threads(every_stage, w, model) for w in (2, 4)}  # all stages, used below
    ddp = {w: [r["ddp"] for r in results] for w, results in runs.items()}
    for w, usages in ddp.items():
        for r, u in enumerate(usages):
            print(f"  W={w} rank {r}: {u.params} + {u.grads} + {u.optimizer} = {u.total} B")
    print(f"  all ranks together at W=4: {sum(u.total for u in ddp[4])} B for one model's state")

# %% [markdown]
# ## 3. The ZeRO paper's answer, measured the same way
# ZeRO-1 shards the optimizer state, ZeRO-2 the gradients too, FSDP (ZeRO-3) the weights as
# well. The same one-step measurement for minidp's ZeRO-1 and ZeRO-2 (lessons 19, 20),
# beside the formulas with p = g = 4 and K = 8 (fp32 AdamW):

# %%
if __name__ == "__main__":
    rows = {}
    print(f"{'stage':<18}{'W':>3}{'max B/rank':>12}{'mean B/rank':>13}{'formula B':>11}   formula")
    formulas = {"ddp": "(4+4+8)Ψ", "zero1": "4Ψ+4Ψ+8Ψ/N", "zero2": "4Ψ+(4+8)Ψ/N"}
    for stage in STAGES:
        for w in (2, 4):
            totals = [r[stage].total for r in runs[w]]
            formula = sum(plan.stage_bytes(stage, numel, w, 4, 4, 8))
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
# Every DDP rank holds exactly what one torch process with AdamW holds; the measurement
# reads the real storages (the moments alone are 8Ψ bytes); and each stage's mean per rank
# is within 1% of its formula, below DDP's.

# %%
if __name__ == "__main__":
    for w, usages in ddp.items():
        for r, u in enumerate(usages):
            kit.check_true(
                f"W={w} rank {r} holds what one torch AdamW process holds",
                (u.params, u.grads, u.optimizer) == (single.params, single.grads, single.optimizer),
                f"{u.total} B",
            )
    kit.check_true(
        "AdamW's two moments are 8 bytes per parameter", storage_bytes(moments) == 8 * numel
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
