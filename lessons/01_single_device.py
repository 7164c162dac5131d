# %% [markdown]
# # Lesson 1 — one device: the baseline
#
# Run: `python lessons/01_single_device.py` (or open it as a notebook and run the cells).
#
# Every later lesson splits this training loop across devices or processes and must
# land on **the same numbers**. So we start with the loop itself, and with the one fact
# all of data parallelism rests on:
#
# > the gradient of the mean loss over a batch equals the size-weighted average of the
# > gradients of the mean losses over its pieces.
#
# That is what lets *N* workers each take a slice of the batch, compute gradients, and
# average them. We check it, see where floating point makes "equal" mean "equal up to
# rounding", and check our SGD update against `torch.optim.SGD` bit for bit.

# %%
import kit
import torch
from torch import nn

kit.title("Lesson 1: single-device training, the baseline")
torch.set_num_threads(1)  # one core, like one rank later: times and bits comparable

STEPS = kit.pick(40, 5)
BATCH = 64
x, y = kit.make_data(STEPS * BATCH + 512)
train, test = kit.batches(x[:-512], y[:-512], BATCH), (x[-512:], y[-512:])
print(f"data: {len(x)} points of {x.shape[1]} features, 4 classes; batch {BATCH}, {STEPS} steps")

# %% [markdown]
# ## 1. Train on one device
# Plain SGD, one step per batch. `kit.make_model(seed)` builds the same weights in every
# process and thread (it draws from its own generator), which later lessons rely on.

# %%
model = kit.make_model(seed=0)
n_params = sum(p.numel() for p in model.parameters())
print(f"model: {model}\n{n_params} parameters ({n_params * 4} bytes of float32 gradients)")
before = kit.accuracy(model, *test)
losses = kit.train_single(model, train, lr=0.1)
for i in range(0, len(losses), max(len(losses) // 8, 1)):
    print(f"  step {i:3d}  loss {losses[i]:.4f}")
print(f"  step {len(losses) - 1:3d}  loss {losses[-1]:.4f}")
print(f"test accuracy: {before:.3f} before -> {kit.accuracy(model, *test):.3f} after")

# %% [markdown]
# ## 2. Split the batch, average the gradients
# Take one batch of 64, cut it into 4 shards of 16 (what 4 workers would each see),
# compute each shard's gradient separately, and average. Compare with the full-batch
# gradient.


# %%
def grads(model: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    nn.functional.cross_entropy(model(xb), yb).backward()
    return [p.grad.clone() for p in model.parameters()]


fresh = kit.make_model(seed=0)
xb, yb = train[0]
full = grads(fresh, xb, yb)
shards = [grads(fresh, xs, ys) for xs, ys in zip(xb.chunk(4), yb.chunk(4))]
averaged = [sum(gs) / 4 for gs in zip(*shards)]
diff = max((a - b).abs().max().item() for a, b in zip(full, averaged))
same = all(torch.equal(a, b) for a, b in zip(full, averaged))
print(f"4 shards of 16: max |full - average of shards| = {diff:.2e}; bit-equal: {same}")
print(
    "  equal in exact arithmetic, not in float32: the full batch sums 64 terms in one order,\n"
    "  the shards sum 16 at a time and then add 4 partial results — a different rounding."
)

# %% [markdown]
# Pieces of **unequal** size (a batch of 10 on 4 workers is cut 3+3+3+1, as
# `tensor.chunk` does): the plain average of the shard means is now *wrong*; each
# shard's gradient must be weighted by its size. DataParallel avoids the issue (it
# computes the loss on the gathered outputs); DDP averages per-rank gradients, which is
# why `DistributedSampler` gives every rank the same number of samples (lesson 12).

# %%
xs10, ys10 = x[:10], y[:10]
full10 = grads(fresh, xs10, ys10)
parts = list(zip(xs10.chunk(4), ys10.chunk(4)))
print("batch of 10 on 4 workers -> shard sizes", [len(p[0]) for p in parts])
g_parts = [grads(fresh, a, b) for a, b in parts]
plain = [sum(gs) / 4 for gs in zip(*g_parts)]
weighted = [sum(len(p[0]) * g for p, g in zip(parts, gs)) / 10 for gs in zip(*g_parts)]
err_plain = max((a - b).abs().max().item() for a, b in zip(full10, plain))
err_weighted = max((a - b).abs().max().item() for a, b in zip(full10, weighted))
print(f"  plain average of shard gradients:     max error {err_plain:.2e}  (wrong)")
print(f"  size-weighted average:                max error {err_weighted:.2e}  (rounding only)")

# %% [markdown]
# ## 3. Check against torch
# * The shard identity, within float32 rounding.
# * Our SGD update, written as `p.add_(grad, alpha=-lr)`, against `torch.optim.SGD`:
#   bit for bit. Written as `p - lr * grad` it is *not*: that rounds twice (once for the
#   product, once for the difference) — the first of many places where "the same formula"
#   is not "the same bits".

# %%
kit.check("full-batch gradient vs average of 4 shard gradients", averaged, full, exact=False)
kit.check("size-weighted average of unequal shards vs full batch", weighted, full10, exact=False)
kit.check_true("plain average of unequal shards is wrong", err_plain > 100 * err_weighted)

a, b = kit.make_model(seed=0), kit.make_model(seed=0)
grads(a, xb, yb), grads(b, xb, yb)
with torch.no_grad():
    for p in a.parameters():
        p.add_(p.grad, alpha=-0.1)  # our update
torch.optim.SGD(b.parameters(), lr=0.1).step()  # the official one
kit.check("hand-written SGD step vs torch.optim.SGD", a, b, exact=True)
c = kit.make_model(seed=0)
grads(c, xb, yb)
with torch.no_grad():
    twice = [p - 0.1 * p.grad for p in c.parameters()]
bits_differ = not all(torch.equal(t, p) for t, p in zip(twice, b.parameters()))
kit.check_true("p - lr*grad rounds differently from SGD", bits_differ)
kit.done()
