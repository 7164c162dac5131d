# %% [markdown]
# # Lesson 29 — uneven inputs: the hang, and `Join`
#
# Run: `python lessons/29_uneven_inputs_join.py`
#
# Every DDP backward is a collective: each rank's gradient all-reduce waits for the same
# all-reduce on every other rank. If rank 0 has 2 batches and rank 1 has 3, rank 1's third
# backward waits for a partner that has left the loop — until the group's timeout: 30
# minutes by default on gloo, 10 on NCCL (torch's `kProcessGroupDefaultTimeout` and
# `kProcessGroupNCCLDefaultTimeout`; `init_process_group(timeout=...)` changes it). It
# happens with an uneven last shard, a sampler without padding, or data filtered per rank.
#
# The fix is `Join`: wrap the loop in `with Join([ddp]):` (torch) or `with ddp.join():`
# (minidp). A rank that runs out keeps *shadowing* the others' collectives — it answers
# each all-reduce with zeros — until every rank is done; then all take the model of the
# last rank to finish. Zeros add nothing, but the divisor stays the **initial** world
# size: a rank training alone on 2 ranks applies g/2, half its own gradient, so every
# sample weighs the same. `divide_by_initial_world_size=False` divides by the ranks still
# training instead (g/1 here: a lone rank's samples weigh more). `throw_on_early_termination=True`
# makes every rank raise as soon as one runs out, for loops that would rather stop.
#
# Join shadows only the collectives of the *Joinable* objects it was given (DDP's
# gradient all-reduce, ZeroRedundancyOptimizer's broadcasts): any other collective in the
# loop — an all-reduce of the loss for logging, a metric — has no shadow, and hangs the
# same way.
#
# Two real rank processes train the same uneven data through torch's `Join` and minidp's
# `join()`, and compare; then show the hang without it, on a process group with a
# 4-second timeout (so it ends in seconds with an error, not after 30 minutes).

# %%
import datetime
import inspect

import kit
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as TorchDDP

from minidp import DistributedDataParallel as MinidpDDP

WORLD, BATCH = 2, 16
COUNTS = kit.pick((3, 5), (2, 3))  # batches per rank: uneven
HANG_S = 4.0  # the short timeout of the groups that show the hang


def my_batches(rank: int) -> list:
    x, y = kit.make_data(BATCH * sum(COUNTS), seed=5)
    everything = kit.batches(x, y, BATCH)
    start = sum(COUNTS[:rank])
    return everything[start : start + COUNTS[rank]]  # this rank's own batches


def train(ddp: nn.Module, batches: list, lone: dict | None = None) -> int:
    """SGD over ``batches``; into ``lone``, on the last batch of a rank training alone:
    its own gradient ("local", from a plain copy) and the one DDP applied ("applied")."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for i, (xb, yb) in enumerate(batches):
        opt.zero_grad()
        alone = lone is not None and i == len(batches) - 1 and i >= min(COUNTS)
        if alone:  # the other rank has joined: what does this rank's step apply?
            plain = kit.make_model()
            plain.load_state_dict(ddp.module.state_dict())
            nn.functional.cross_entropy(plain(xb), yb).backward()
            lone["local"] = [p.grad for p in plain.parameters()]
        nn.functional.cross_entropy(ddp(xb), yb).backward()
        if alone:
            lone["applied"] = [p.grad.clone() for p in ddp.module.parameters()]
        opt.step()
    return len(batches)


def lone_gradients(rank: int, make_ddp, join, divide: bool) -> dict:
    """Train the uneven batches under Join; the lone rank's local and applied gradients."""
    ddp, lone = make_ddp(kit.make_model()), {}
    with join(ddp, divide):
        train(ddp, my_batches(rank), lone)
    return lone


def without_join(rank: int, make_ddp) -> str:
    """Train the uneven batches with no Join on a group with a short timeout; the error."""
    dist.barrier()  # start together (on the default group, whose timeout is long)
    group = dist.new_group(list(range(WORLD)), timeout=datetime.timedelta(seconds=HANG_S))
    try:
        train(make_ddp(kit.make_model(), process_group=group), my_batches(rank))
        return ""
    except RuntimeError as exc:  # gloo's timeout (torch) or minidp's CollectiveTimeout
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def rank_main(rank: int, world: int) -> dict:
    """One rank process: torch's Join, minidp's join(), then the hang (both libraries)."""
    batches = my_batches(rank)
    theirs = TorchDDP(kit.make_model())
    with Join([theirs]):
        train(theirs, batches)
    ours = MinidpDDP(kit.make_model())
    with ours.join():
        steps = train(ours, batches)
    kit.say(rank, f"trained {steps} batches under join, then shadowed until all were done")
    joins = {  # library: (DDP, its Join with the divisor flag)
        "torch": (TorchDDP, lambda d, div: Join([d], divide_by_initial_world_size=div)),
        "minidp": (MinidpDDP, lambda d, div: d.join(divide_by_initial_world_size=div)),
    }
    lone = {
        (lib, divide): lone_gradients(rank, make, join, divide)
        for lib, (make, join) in joins.items()
        for divide in (True, False)
    }
    # Now without Join. Last, so that the first DDP's start-up (slow on a loaded machine)
    # is behind us: a rank merely slower than the short timeout would fail too.
    errors = {"torch": without_join(rank, TorchDDP), "minidp": without_join(rank, MinidpDDP)}
    return {
        "torch": theirs.module,
        "minidp": ours.module,
        "steps": steps,
        "errors": errors,
        "lone": lone,
    }


# %% [markdown]
# ## 1. With Join, then without it: two rank processes
# Each rank trains its batches through torch's `Join` and minidp's `join()`, then with no
# Join, once through torch's DDP and once through minidp's, each on a group whose timeout
# is 4 s.

# %%
if __name__ == "__main__":
    kit.title("Lesson 29: uneven inputs — the hang, and Join")
    print(f"batches per rank: {dict(enumerate(COUNTS))}")
    results = kit.spawn(rank_main, WORLD)
    for r, res in enumerate(results):
        for lib, err in res["errors"].items():
            print(f"rank {r}, {lib} DDP without Join: {err or 'finished its batches'}")

# %% [markdown]
# ### Alone on 2 ranks: g/2, or g with `divide_by_initial_world_size=False`
# Rank 1's last batch, after rank 0 has joined: the gradient its DDP applied, against its
# own gradient (a plain copy of the model on the same batch).

# %%
if __name__ == "__main__":
    lone = results[1]["lone"]
    for (lib, divide), g in lone.items():
        ratio = (g["applied"][0] / g["local"][0]).flatten()[0].item()
        print(
            f"  {lib:>6}, divide_by_initial_world_size={divide!s:<5}: applied / own = {ratio:.3f}"
        )

# %% [markdown]
# ## 2. What a joined rank does
# The context manager is torch's `Join` for both libraries: while anyone still trains, a
# joined rank answers their "I am here" (`Join` does that), then runs each joinable's
# `main_hook`. minidp's DDP's (from `minidp/ddp/join.py`): a rebuild if due, the buffer
# broadcast, their sync announcement and every bucket's all-reduce, with zeros.

# %%
if __name__ == "__main__":
    from minidp.ddp.join import DDPJoinHook

    print(inspect.getsource(DDPJoinHook.main_hook))

# %% [markdown]
# ## Checks
# minidp's join sends the same sums as torch's (zeros from the joined rank, the same
# divisor), so the final models agree bit for bit; and every rank ends with the same model.

# %%
if __name__ == "__main__":
    for lib in ("torch", "minidp"):
        errs = [res["errors"][lib] for res in results]
        kit.check_true(
            f"{lib} DDP without Join: rank 1 (more batches) times out, rank 0 finishes",
            not errs[0] and "timed out" in errs[1].lower(),
            errs[1],
        )
    kit.check_true(
        "each rank trained its own number of batches",
        [r["steps"] for r in results] == list(COUNTS),
        str([r["steps"] for r in results]),
    )
    for r, res in enumerate(results):
        kit.check(
            f"rank {r}: minidp join() vs torch Join, final parameters", res["minidp"], res["torch"]
        )
    for (lib, divide), g in results[1]["lone"].items():
        divisor = WORLD if divide else 1
        kit.check(
            f"{lib}, divide_by_initial_world_size={divide}: the lone rank applies g/{divisor}",
            g["applied"],
            [t / divisor for t in g["local"]],
            exact=False,
        )
    kit.check(
        "rank 1's model vs rank 0's after join (both libraries)",
        results[1]["minidp"],
        results[0]["torch"],
    )
    kit.done()
