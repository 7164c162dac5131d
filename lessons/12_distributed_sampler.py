# %% [markdown]
# # Lesson 12 — DistributedSampler and `set_epoch`
#
# Run: `python lessons/12_distributed_sampler.py`
#
# Each rank must train on *its own* part of the data, and all parts together must cover
# the dataset. `DistributedSampler` does it without any communication: every rank builds
# the same index list (same seed), pads it to a multiple of the world size, and takes
# every `world`-th index starting at its rank.
#
# Two things learners trip on:
# * **padding repeats samples**: 10 samples on 3 ranks -> 12 indices, two seen twice
#   (`drop_last=True` cuts instead). Every rank gets the same count because DDP's
#   all-reduce needs every rank at every step;
# * **forgetting `set_epoch`**: the shuffle is seeded with `seed + epoch`. Without
#   `sampler.set_epoch(epoch)` every epoch replays the *same* order. (One article's
#   comment says set_epoch "keeps the data consistent across processes" — they are
#   consistent anyway, through the seed; set_epoch changes the order *between epochs*.)
#
# minidp's sampler against torch's, index for index; then broken vs fixed on real ranks.

# %%
import inspect

import kit
import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler as TorchSampler

import minidp
from minidp.textbook import sampler as textbook_sampler

# %% [markdown]
# ## 1. Who gets what: 10 samples, 3 ranks

# %%
if __name__ == "__main__":  # the rank processes import this file: keep them quiet
    kit.title("Lesson 12: DistributedSampler and set_epoch")
    for shuffle, drop_last in ((False, False), (False, True), (True, False)):
        print(f"shuffle={shuffle}, drop_last={drop_last}:")
        for r in range(3):
            s = minidp.DistributedSampler(
                range(10), num_replicas=3, rank=r, shuffle=shuffle, drop_last=drop_last
            )
            print(f"  rank {r}: {list(s)}")
    print("(no drop_last: indices 0 and 1 are seen twice; the ranks still get equal counts)")

# %% [markdown]
# ## 2. The whole sampler in a few lines
# `minidp.textbook.sampler.DistributedSampler.__iter__`, printed from minidp's own
# source (`inspect.getsource`): one permutation seeded with `seed + epoch`, padded or cut
# to a multiple of the world size, every `world`-th index from `rank` on.

# %%
if __name__ == "__main__":
    print(inspect.getsource(textbook_sampler.DistributedSampler.__iter__))

# %% [markdown]
# What the faithful `minidp.DistributedSampler` (`minidp/ddp/sampler.py`) adds: rank and
# world size taken from the process group when not given, checks on both, `len()` without
# building the list, and torch's own arithmetic for the padding, line by line. The check
# in section 4 runs the textbook one against torch's too.

# %% [markdown]
# ## 3. Broken, then fixed: set_epoch on 2 real ranks
# Each rank trains with `minidp.DistributedDataParallel` on a `DataLoader` driven by the
# sampler, for 3 epochs, and records the first samples of each epoch.

# %%
N, EPOCHS = kit.pick(256, 64), 3


def epochs_lesson(rank: int, world: int) -> dict:
    x, y = kit.make_data(N)
    data = TensorDataset(torch.arange(N), x, y)  # the index travels along, to see it
    out = {}
    for call_set_epoch in (False, True):
        sampler = minidp.DistributedSampler(data, shuffle=True, seed=42)  # rank/world: the group's
        loader = DataLoader(data, batch_size=16, sampler=sampler)
        ddp = minidp.DistributedDataParallel(kit.make_model(seed=0))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        seen = []
        for epoch in range(EPOCHS):
            if call_set_epoch:
                sampler.set_epoch(epoch)  # the fix: one line per epoch
            order = []
            for idx, xb, yb in loader:
                order += idx.tolist()
                opt.zero_grad()
                torch.nn.functional.cross_entropy(ddp(xb), yb).backward()
                opt.step()
            seen.append(order)
            label = "with set_epoch   " if call_set_epoch else "without set_epoch"
            kit.say(rank, f"{label} epoch {epoch}: first samples {order[:6]}")
        out[call_set_epoch] = seen
    return out


if __name__ == "__main__":
    res = kit.spawn(epochs_lesson, 2)

# %% [markdown]
# ## 4. Checks
# * minidp's sampler and the textbook one == `torch.utils.data.distributed.DistributedSampler`,
#   for several sizes, world sizes, epochs, shuffle and drop_last settings;
# * the ranks' shares are disjoint (apart from padding) and cover the dataset;
# * without set_epoch every epoch repeats the same order; with it, they differ.

# %%
if __name__ == "__main__":
    same, configs = True, 0
    for n in (1, 7, 10, 64, 101):
        for world in (1, 2, 3, 4):
            for shuffle in (False, True):
                for drop_last in (False, True):
                    for epoch in (0, 3):
                        configs += 1
                        for r in range(world):
                            kw = dict(
                                num_replicas=world,
                                rank=r,
                                shuffle=shuffle,
                                seed=7,
                                drop_last=drop_last,
                            )
                            a, b, c = (
                                minidp.DistributedSampler(range(n), **kw),
                                TorchSampler(range(n), **kw),
                                textbook_sampler.DistributedSampler(range(n), **kw),
                            )
                            for sampler in (a, b, c):
                                sampler.set_epoch(epoch)
                            same &= list(a) == list(b) == list(c) and len(a) == len(b) == len(c)
    kit.check_true(
        f"minidp.DistributedSampler and the textbook one == torch's, every rank of "
        f"{configs} configurations",
        same,
    )

    covered = sorted(set(res[0][True][0]) | set(res[1][True][0]))
    overlap = set(res[0][True][0]) & set(res[1][True][0])
    kit.check_true(
        f"2 ranks cover all {N} samples, none twice (N divisible by 2)",
        covered == list(range(N)) and not overlap,
    )
    without, with_ = res[0][False], res[0][True]
    kit.check_true(
        "without set_epoch: every epoch has the same order", all(e == without[0] for e in without)
    )
    kit.check_true(
        "with set_epoch: every epoch has a different order",
        len({tuple(e) for e in with_}) == EPOCHS,
    )
    kit.done()

# %% [markdown]
# ## Your turn
# Write the sampler's indices yourself (with the epoch in the seed); the checker compares
# them with torch's `DistributedSampler`: `python -m minidp exercise check distributed_sampler`.

# %%
if __name__ == "__main__":
    print("Exercise: python -m minidp exercise check distributed_sampler")
