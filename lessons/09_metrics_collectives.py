# %% [markdown]
# # Lesson 9 — evaluating on every rank: all_reduce, all_gather, broadcast
#
# Run: `python lessons/09_metrics_collectives.py`
#
# In a multi-process job each rank only sees its own shard of the evaluation set. To
# report one number you combine the ranks' partial results with a collective, then
# **print once** (from rank 0) — otherwise every rank prints its own, different,
# "accuracy".
#
# * `all_reduce(sum)` of *counts* (correct, total) → the global accuracy, exactly;
# * averaging the ranks' *accuracies* is wrong when shards differ in size (measured below);
# * `all_gather` → every rank gets every rank's tensor (e.g. predictions; needs equal
#   sizes, so pad and send the true lengths too);
# * `broadcast` → one rank's value (a decision, a seed, a config) reaches everybody.
#
# 3 real rank processes. The test set is stored as files of different sizes and each
# rank reads its own: 60% / 30% / 10% of the 1000 points.

# %%
import inspect

import kit
import torch
import torch.distributed as dist

import minidp
from minidp.comm import all_gather, all_reduce, broadcast
from minidp.comm import group as groups
from minidp.textbook import collectives as textbook
from minidp.tools.exercise import reference

WORLD = 3
N_TEST = kit.pick(1000, 400)
TRAIN_STEPS = 30


FRACTIONS = [0.6, 0.3, 0.1]  # rank r's share of the test set


def shard(n: int, rank: int, world: int) -> slice:
    """Rank ``rank``'s contiguous block of the ``n`` test points."""
    bounds = [0] + [round(n * sum(FRACTIONS[: r + 1])) for r in range(world)]
    return slice(bounds[rank], bounds[rank + 1])


NOISE = [0.0, 0.4, 0.8]  # share of wrong labels in each rank's shard: harder data sources


def test_set() -> tuple[torch.Tensor, torch.Tensor]:
    """The test set; later shards come from noisier sources, so the shards score unalike."""
    x, y = kit.make_data(N_TEST, seed=99)
    g = torch.Generator().manual_seed(7)
    for r in range(WORLD):
        rows = torch.arange(N_TEST)[shard(N_TEST, r, WORLD)]
        flip = rows[torch.rand(len(rows), generator=g) < NOISE[r]]
        y[flip] = (y[flip] + 1) % kit.CLASSES  # a wrong label, deterministically
    return x, y


def evaluate(rank: int, world: int, state: dict) -> dict:
    model = kit.make_model(seed=0)
    model.load_state_dict(state)  # same trained weights on every rank
    x, y = test_set()
    mine = shard(N_TEST, rank, world)
    with torch.no_grad():
        pred = model(x[mine]).argmax(1)
    correct = (pred == y[mine]).sum()
    local_acc = correct.item() / len(pred)
    kit.say(
        rank, f"shard {mine.start}:{mine.stop} ({len(pred)} points), local accuracy {local_acc:.4f}"
    )

    # all_reduce the counts, not the accuracies
    counts = torch.tensor([correct.item(), len(pred)], dtype=torch.int64)
    counts_torch = counts.clone()
    all_reduce(counts)  # minidp: 16 bytes, so "auto" sends it in one direct exchange
    dist.all_reduce(counts_torch)  # torch.distributed, same inputs
    global_acc = counts[0].item() / counts[1].item()

    # the tempting mistake: average the ranks' accuracies
    accs = torch.tensor([local_acc], dtype=torch.float64)
    all_reduce(accs, op="avg")
    kit.say0(rank, f"global accuracy from summed counts: {global_acc:.6f}")
    kit.say0(rank, f"mean of per-rank accuracies:        {accs.item():.6f}  (not the same)")

    # all_gather the predictions: pad to the longest shard, gather the lengths too
    longest = max(
        shard(N_TEST, r, world).stop - shard(N_TEST, r, world).start for r in range(world)
    )
    padded = torch.full((longest,), -1, dtype=torch.int64)
    padded[: len(pred)] = pred
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    all_gather(lengths, torch.tensor([len(pred)]))
    gathered = [torch.empty(longest, dtype=torch.int64) for _ in range(world)]
    all_gather(gathered, padded)
    gathered_torch = [torch.empty(longest, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered_torch, padded)
    every_pred = torch.cat([g[: int(n)] for g, n in zip(gathered, lengths)])

    # broadcast: rank 0 decides something (here: which class it saw most) and tells all
    decision = torch.tensor([int(torch.bincount(pred, minlength=4).argmax()) if rank == 0 else -1])
    decision_torch = decision.clone()
    broadcast(decision, src=0)
    dist.broadcast(decision_torch, src=0)
    kit.say(rank, f"rank 0's decision arrived: class {decision.item()}")
    return {
        "counts": counts,
        "counts_torch": counts_torch,
        "mean_of_accs": accs.item(),
        "gathered": gathered,
        "gathered_torch": gathered_torch,
        "every_pred": every_pred,
        "decision": decision,
        "decision_torch": decision_torch,
    }


# %% [markdown]
# ## Train once (the lesson-1 baseline), evaluate on 3 ranks

# %%
if __name__ == "__main__":
    kit.title("Lesson 9: metrics on every rank — all_reduce, all_gather, broadcast")
    model = kit.make_model(seed=0)
    xt, yt = kit.make_data(TRAIN_STEPS * 64, seed=1)
    kit.train_single(model, kit.batches(xt, yt, 64))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    res = kit.spawn(evaluate, WORLD, state)

# %% [markdown]
# ## all_gather and broadcast in code
# The textbook versions from `minidp/textbook/collectives.py`, printed from the real module:
# all_gather is the all-gather half of the ring (lesson 8); broadcast is a binomial tree.
# Both only copy, so they must equal gloo's bit for bit on any dtype.

# %%
TEXTBOOK_SHOWN = (textbook.all_gather, textbook.broadcast)


def textbook_vs_gloo(rank: int, world: int) -> dict:
    g = groups.resolve()
    x = torch.randn(5, generator=torch.Generator().manual_seed(rank))
    ours = [torch.empty(5) for _ in range(world)]
    textbook.all_gather(ours, x)
    # gloo's own all_gather and broadcast: a thread rank's group is not registered with
    # torch.distributed, so call its methods, as torch.distributed does underneath
    theirs = reference.all_gather(x, g)
    b_ours, b_theirs = x.clone(), x.clone()
    textbook.broadcast(b_ours, src=world - 1)
    reference.broadcast(b_theirs, world - 1, g)
    return {"gather": (ours, theirs), "bcast": (b_ours, b_theirs)}


if __name__ == "__main__":
    for fn in TEXTBOOK_SHOWN:
        print(inspect.getsource(fn))
    print(
        "The faithful versions in minidp.comm add the cross-rank agreement check, and\n"
        "all_gather sends 1 MiB segments through the pipelined ring_pass; minidp.comm.broadcast\n"
        "is flat (the root sends to every rank: n-1 messages from one rank), the tree\n"
        "needs ceil(log2 n) rounds."
    )
    for n in (3, 5):
        out = minidp.launch.run_threads(textbook_vs_gloo, n)
        kit.check(
            f"textbook.all_gather vs torch.distributed.all_gather, {n} ranks",
            [r["gather"][0] for r in out],
            [r["gather"][1] for r in out],
        )
        kit.check(
            f"textbook.broadcast (tree, src={n - 1}) vs torch.distributed.broadcast, {n} ranks",
            [r["bcast"][0] for r in out],
            [r["bcast"][1] for r in out],
        )

# %% [markdown]
# ## Checks against one process and against torch.distributed
# The single-process evaluation on the full test set is the truth. The shards come from
# sources of different quality (0%, 40%, 80% wrong labels) and have different sizes
# (60/30/10%), so they score very differently — and the mean of their accuracies, which
# weighs the small noisy shard like the big clean one, is visibly wrong.

# %%
if __name__ == "__main__":
    x, y = test_set()
    with torch.no_grad():
        pred = model(x).argmax(1)
    truth = torch.tensor([(pred == y).sum().item(), N_TEST])
    print(f"one process, all {N_TEST} points: accuracy {truth[0].item() / N_TEST:.6f}")
    for r in range(WORLD):
        kit.check(
            f"rank {r}: all_reduce'd (correct, total) vs one process", res[r]["counts"], truth
        )
    kit.check(
        "minidp all_reduce vs torch.distributed.all_reduce",
        res[0]["counts"],
        res[0]["counts_torch"],
    )
    kit.check_true(
        "mean of per-rank accuracies is off the true accuracy by more than 0.05 (uneven shards)",
        abs(res[0]["mean_of_accs"] - truth[0].item() / N_TEST) > 0.05,
        f"{res[0]['mean_of_accs']:.6f} vs {truth[0].item() / N_TEST:.6f}",
    )
    kit.check(
        "minidp all_gather vs torch.distributed.all_gather",
        res[1]["gathered"],
        res[1]["gathered_torch"],
    )
    kit.check("gathered predictions (unpadded) vs one process", res[2]["every_pred"], pred)
    kit.check(
        "minidp broadcast vs torch.distributed.broadcast, every rank",
        [r["decision"] for r in res],
        [r["decision_torch"] for r in res],
    )
    kit.done()

# %% [markdown]
# ## Your turn
# Write them yourself in `lessons/exercises/` and check each against torch.distributed:
# `python -m minidp exercise check all_gather`, `... broadcast`, and `... average_metric`
# (the mean of a metric over shards of different sizes, without the mean-of-means trap).

# %%
if __name__ == "__main__":
    print("\nExercises: edit the stubs in lessons/exercises/, then check them against torch:")
    print("  python -m minidp exercise check all_gather")
    print("  python -m minidp exercise check broadcast")
    print("  python -m minidp exercise check average_metric")
