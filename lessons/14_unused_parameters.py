# %% [markdown]
# # Lesson 14 — unused parameters
#
# Run: `python lessons/14_unused_parameters.py`
#
# DDP counts down, per bucket, the gradients it is waiting for; a bucket is all-reduced
# when its count reaches zero. A parameter that the forward did not use never gets a
# gradient, so its bucket never completes: the step ends with that bucket unreduced, and
# the **next** forward refuses to start ("Expected to have finished reduction in the prior
# iteration..."). Typical causes: an auxiliary head used only sometimes, a branch taken
# on some ranks only. *Not* a cause: a frozen layer (`requires_grad=False`) — DDP neither
# waits for nor reduces parameters that do not require gradients (checked below).
#
# The fix, `find_unused_parameters=True`: after each forward DDP walks the autograd graph
# from the outputs and marks every parameter it cannot reach as ready at once (its slot
# in the bucket is zero). A parameter no rank used keeps `.grad = None`; one used on some
# ranks only gets the average (the others contribute zeros). The walk costs time every
# step, which is why it is not the default.
#
# Broken, then fixed, on 2 real ranks, minidp and torch side by side.

# %%
import kit
import torch
import torch.distributed as dist
from torch import nn

import minidp

STEPS = kit.pick(4, 2)


# %% [markdown]
# ## The model: a body, and an auxiliary head the forward may skip


# %%
class TwoHeads(nn.Module):
    """The baseline MLP plus an auxiliary head that the forward uses only when asked."""

    def __init__(self) -> None:
        super().__init__()
        self.body = kit.make_model(seed=0)
        torch.manual_seed(5)
        self.aux = nn.Linear(kit.IN_FEATURES, kit.CLASSES)
        self.use_aux = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        return out + self.aux(x) if self.use_aux else out


# %% [markdown]
# ## Broken: the head is never used, default DDP
# The first step's backward ends with the head's bucket unreduced; the second forward
# refuses to start.


# %%
def first_error(wrapper, rank: int, model: nn.Module | None = None) -> str:
    """Broken: aux never used, default DDP. Step 1 passes; step 2's forward raises."""
    ddp = wrapper(model or TwoHeads())
    x, y = kit.make_data(32, seed=rank)
    try:
        for step in range(2):
            nn.functional.cross_entropy(ddp(x), y).backward()
            kit.say0(rank, f"  step {step}: backward finished without complaint")
    except RuntimeError as exc:
        return str(exc)
    return ""


# %% [markdown]
# ## Not a cause: a frozen layer
# The head is used, but `requires_grad=False`: DDP leaves such parameters out of its
# buckets entirely, so nothing waits for them.


# %%
def frozen(rank: int) -> nn.Module:
    """Not a cause: aux IS used, but frozen (requires_grad=False): DDP skips its parameters."""
    model = TwoHeads()
    model.use_aux = True
    model.aux.requires_grad_(False)
    return model


# %% [markdown]
# ## Fixed: `find_unused_parameters=True`
# Who uses the head is a function of (rank, step): nobody, or rank 0 only.


# %%
def train(wrapper, rank: int, aux_on) -> nn.Module:
    """Fixed: find_unused_parameters=True; ``aux_on(rank, step)`` says who uses the head."""
    model = TwoHeads()
    ddp = wrapper(model, find_unused_parameters=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x, y = kit.make_data(STEPS * 32, seed=rank)
    for step, (xb, yb) in enumerate(kit.batches(x, y, 32)):
        model.use_aux = aux_on(rank, step)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(ddp(xb), yb).backward()
        opt.step()
    return model


def never(rank: int, step: int) -> bool:
    return False


def rank0_only(rank: int, step: int) -> bool:
    return rank == 0


# %% [markdown]
# ## Run it on 2 real ranks, minidp and torch side by side


# %%
def unused_lesson(rank: int, world: int) -> dict:
    out = {}
    for name, wrapper in (
        ("minidp", minidp.DistributedDataParallel),
        ("torch", nn.parallel.DistributedDataParallel),
    ):
        kit.say0(rank, f"{name} DDP, aux head never used, default settings:")
        out[f"{name} error"] = first_error(wrapper, rank)
        dist.barrier()
        kit.say0(rank, f"{name} DDP, aux head used but frozen, default settings:")
        out[f"{name} frozen error"] = first_error(wrapper, rank, frozen(rank))
        dist.barrier()
        for who in (never, rank0_only):
            model = train(wrapper, rank, who)
            out[f"{name} {who.__name__}"] = model
            out[f"{name} {who.__name__} aux grad"] = model.aux.weight.grad
    dist.barrier()
    return out


if __name__ == "__main__":
    kit.title("Lesson 14: unused parameters")
    res = kit.spawn(unused_lesson, 2)
    for name in ("minidp", "torch"):
        print(
            f"\n{name} DDP's error at the second forward:\n  "
            + res[0][f"{name} error"].replace("\n", "\n  ")
        )
    print("\nwith find_unused_parameters=True:")
    print(f"  aux used by nobody:   aux.weight.grad is {res[0]['minidp never aux grad']}")
    g = res[1]["minidp rank0_only aux grad"]
    print(f"  aux used by rank 0 only: rank 1's aux.weight.grad norm {g.norm():.5f} (the average)")

# %% [markdown]
# About the warning torch printed above ("find_unused_parameters=True was specified in DDP
# constructor, but did not find any unused parameters in the forward pass"): it comes from
# rank 0 in the run where only rank 0 uses the head — on *that* rank, in that step, every
# parameter was used, so the graph walk found nothing to mark. It is a hint, not an error:
# if no step on any rank ever leaves a parameter unused, turn the flag off and save the
# walk; here rank 1 does leave the head unused, so the flag is needed. (Its own text warns
# it may be a false positive when control flow differs between iterations or ranks.)

# %% [markdown]
# ## Checks

# %%
if __name__ == "__main__":
    for name in ("minidp", "torch"):
        msg = res[0][f"{name} error"]
        kit.check_true(
            f"{name}: the second forward raised 'Expected to have finished reduction ...' naming "
            f"the unused parameter indices (aux is 6 and 7)",
            "Expected to have finished reduction in the prior iteration" in msg and "6 7" in msg,
        )
        kit.check_true(
            f"{name}: a frozen layer (requires_grad=False) is not a cause: no error at step 2",
            res[0][f"{name} frozen error"] == "" and res[1][f"{name} frozen error"] == "",
            res[0][f"{name} frozen error"][:200],
        )
    for who in ("never", "rank0_only"):
        kit.check(
            f"find_unused_parameters=True, aux used by {'nobody' if who == 'never' else 'rank 0 only'}: "
            "minidp vs torch DDP, both ranks",
            [r[f"minidp {who}"] for r in res],
            [r[f"torch {who}"] for r in res],
        )
    kit.check_true(
        "aux used by nobody: .grad stays None (minidp and torch)",
        all(r[f"{n} never aux grad"] is None for r in res for n in ("minidp", "torch")),
    )
    kit.check(
        "aux used by rank 0 only: both ranks hold the same averaged gradient",
        res[1]["minidp rank0_only aux grad"],
        res[0]["minidp rank0_only aux grad"],
    )
    kit.done()
