# %% [markdown]
# # Lesson 30 — DistributedSampler's padding skews evaluation, and the fix
#
# Run: `python lessons/30_sampler_padding_eval.py`
#
# `DistributedSampler` gives every rank the same number of indices (lesson 12): 10 samples
# on 3 ranks become 12 indices, the first two samples seen twice. For *training* that is
# harmless. For *evaluation* it is a bug: all-reduce the correct counts and the sample
# counts (lesson 9) and you divide by 12, with samples 0 and 1 counted twice. The
# accuracy you report is not the model's accuracy on the dataset.
#
# Fixes, each measured here against the exact one-process accuracy:
# * **drop the duplicates by position**: index number `i` of rank `r` sits at position
#   `r + i·world` of the padded list; positions `>= len(dataset)` are padding;
# * **an uneven split**: rank `r` evaluates `range(r, n, world)` (4, 3 and 3 samples here),
#   counts all-reduced. Evaluation runs no DDP backward, so unequal counts cannot hang.
#
# (With `shuffle=False`, as evaluation usually runs, both fixes pick the same indices; the
# first also works on a shuffled sampler.) `drop_last=True` is *not* a fix: it evaluates 9 of the 10 samples.
#
# Ranks are threads with real gloo groups (`minidp.launch.run_threads`); the counts are
# summed with `minidp.comm.all_reduce`.

# %%
import kit
import torch
from torch.utils.data.distributed import DistributedSampler as TorchSampler

import minidp
from minidp.launch import run_threads

N, WORLD = 10, 3


def indices_for(rank: int, world: int, n: int, how: str) -> list[int]:
    """The dataset indices this rank evaluates, and (for "dedup") only the real ones."""
    if how == "uneven":
        return list(range(rank, n, world))
    sampler = minidp.DistributedSampler(
        range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=how == "drop_last"
    )
    idx = list(sampler)
    if how == "dedup":  # position of idx[i] in the padded list: rank + i * world
        idx = [j for i, j in enumerate(idx) if rank + i * world < n]
    return idx


def evaluate(rank: int, world: int, correct: torch.Tensor, how: str) -> torch.Tensor:
    """Every rank: count its right answers and samples, then sum both over the ranks.

    ``correct``: (n,) bool, whether the model is right on each sample (computed once,
    before the threads start; a real rank would run the model on its own indices).
    """
    idx = indices_for(rank, world, len(correct), how)
    counts = torch.tensor([int(correct[idx].sum()), len(idx)])  # rank-local (right, seen)
    minidp.comm.all_reduce(counts)  # sum over ranks, the same on every rank
    return counts


# %% [markdown]
# ## 1. A model and its exact accuracy on 10 samples (one process)

# %%
if __name__ == "__main__":
    kit.title("Lesson 30: DistributedSampler's padding skews evaluation, and the fix")
    model = kit.make_model()
    kit.train_single(model, kit.batches(*kit.make_data(256, seed=3), 32), lr=0.5)
    x, y = kit.make_data(N, seed=7)
    with torch.no_grad():
        correct = model(x).argmax(1) == y  # (N,) bool
    exact = torch.tensor([int(correct.sum()), N])
    print(f"right on samples {correct.nonzero().flatten().tolist()}")
    print(f"exact accuracy, one process: {exact[0]}/{exact[1]} = {exact[0] / exact[1]:.3f}")

# %% [markdown]
# ## 2. Who evaluates what
# minidp's sampler and torch's give the same indices (checked below); padding repeats the
# head of the list.

# %%
if __name__ == "__main__":
    for how in ("padded", "drop_last", "dedup", "uneven"):
        shares = [indices_for(r, WORLD, N, how) for r in range(WORLD)]
        print(f"{how:>9}: " + "  ".join(f"rank {r}: {s}" for r, s in enumerate(shares)))
    torch_shares = [list(TorchSampler(range(N), WORLD, r, shuffle=False)) for r in range(WORLD)]
    ours_shares = [indices_for(r, WORLD, N, "padded") for r in range(WORLD)]

# %% [markdown]
# ## 3. Evaluate on 3 ranks, counts all-reduced

# %%
if __name__ == "__main__":
    results = {}
    for how in ("padded", "drop_last", "dedup", "uneven"):
        per_rank = run_threads(evaluate, WORLD, correct, how)
        results[how] = per_rank[0]
        right, seen = per_rank[0].tolist()
        print(f"{how:>9}: {right}/{seen} = {right / seen:.3f}   (exact {exact[0] / N:.3f})")
    same_on_ranks = all(torch.equal(c, per_rank[0]) for c in per_rank)
    # the padded accuracy computed from torch's own sampler indices, in one process
    flat = torch.tensor([i for share in torch_shares for i in share])
    torch_padded = torch.tensor([int(correct[flat].sum()), len(flat)])

# %% [markdown]
# ## Checks
# Counts are integers: every comparison is exact.

# %%
if __name__ == "__main__":
    kit.check(
        "minidp.DistributedSampler vs torch's, 10 samples on 3 ranks",
        [torch.tensor(s) for s in ours_shares],
        [torch.tensor(s) for s in torch_shares],
    )
    kit.check("padded counts vs torch's sampler indices counted", results["padded"], torch_padded)
    padded_acc = results["padded"][0] / results["padded"][1]
    kit.check_true(
        "padding counts 12 samples and skews the accuracy",
        int(results["padded"][1]) == 12 and padded_acc.item() != (exact[0] / N).item(),
        f"{padded_acc.item():.3f} vs exact {(exact[0] / N).item():.3f}",
    )
    kit.check_true("drop_last evaluates only 9 samples", int(results["drop_last"][1]) == 9)
    kit.check("dropping padding by position vs one process", results["dedup"], exact)
    kit.check("uneven split vs one process", results["uneven"], exact)
    uneven = [indices_for(r, WORLD, N, "uneven") for r in range(WORLD)]
    kit.check_true(
        "the uneven split: 4, 3 and 3 samples, every sample once",
        [len(u) for u in uneven] == [4, 3, 3] and sorted(sum(uneven, [])) == list(range(N)),
        str(uneven),
    )
    kit.check_true("every rank holds the same counts", same_on_ranks)
    kit.done()
