# %% [markdown]
# # Lesson 29 — uneven inputs: the hang, and `Join`
#
# Run: `python lessons/29_uneven_inputs_join.py`
#
# Every DDP backward is a collective: each rank's gradient all-reduce waits for the same
# all-reduce on every other rank. If rank 0 has 2 batches and rank 1 has 3, rank 1's third
# backward waits for a partner that has left the loop — forever, by default (the
# process group's timeout is 30 minutes). It happens with an uneven last shard, a
# sampler without padding, or data filtered per rank.
#
# The fix is `Join`: wrap the loop in `with Join([ddp]):` (torch) or `with ddp.join():`
# (minidp). A rank that runs out keeps *shadowing* the others' collectives — it answers
# each all-reduce with zeros — until every rank is done; then all take the model of the
# last rank to finish. Zeros add nothing, so the ranks still training average their own
# gradients (divided by the initial world size).
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


def train(ddp: nn.Module, batches: list) -> int:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for xb, yb in batches:
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(xb), yb).backward()
        opt.step()
    return len(batches)


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
    # Now without Join. Last, so that the first DDP's start-up (slow on a loaded machine)
    # is behind us: a rank merely slower than the short timeout would fail too.
    errors = {"torch": without_join(rank, TorchDDP), "minidp": without_join(rank, MinidpDDP)}
    return {"torch": theirs.module, "minidp": ours.module, "steps": steps, "errors": errors}


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
# ## 2. What a joined rank does
# minidp's `Join.__exit__` (from `minidp/ddp/join.py`): while anyone still trains, answer
# their "I am here", their sync announcement and every bucket's all-reduce with zeros.

# %%
if __name__ == "__main__":
    from minidp.ddp.join import Join as MinidpJoin

    print(inspect.getsource(MinidpJoin._shadow_iteration))

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
    kit.check(
        "rank 1's model vs rank 0's after join (both libraries)",
        results[1]["minidp"],
        results[0]["torch"],
    )
    kit.done()
