# %% [markdown]
# # Lesson 32 — clipping and accumulation when the gradients are sharded
#
# Run: `python lessons/32_clip_and_accumulate_sharded.py`
#
# Two moves every real training loop makes, and what sharding does to them:
#
# * **`torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`** scales every
#   gradient by `max_norm / ‖g‖` when the norm is too large. ‖g‖ is the norm of *all*
#   gradients together. Under FSDP each rank holds only its rows of each gradient, so
#   the norm it can compute alone is a *part* of the norm. If every rank clipped by its
#   own part, the ranks would scale by different factors and their replicas would drift
#   apart — silently. FSDP2's gradients are DTensors: the norm of a sharded DTensor is a
#   partial value, turned into the global one (`x**p`, all-reduce sum, `x**(1/p)`) before
#   it is used. minidp's shard gradients are DTensors too (`minidp/fsdp/dtensor.py`).
# * **gradient accumulation**: several micro-batches' backwards, one step. Each backward
#   under FSDP reduce-scatters; `model.set_requires_gradient_sync(False)` (FSDP2's name;
#   DDP's `no_sync` in lesson 13) keeps the unsharded gradients instead, and only the last
#   micro-batch's backward reduce-scatters the sum — at the price of the full gradient on
#   every rank until then, and for fewer bytes than one might hope (section 2 says why).
# * **ZeRO-2** frees the full gradients during backward: section 3 shows what stands in
#   their place so that the ordinary `clip_grad_norm_` call still gets the global norm.

# %%
import warnings

import kit
import torch
import torch.nn.functional as F
from torch import nn

import minidp
from minidp.fsdp import traffic
from minidp.zero import Zero2Optimizer

WORLD, MAX_NORM = 2, 0.5
# FSDP2 warns that a Linear's 3-d output is a view (about in-place ops we do not do)
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
VOCAB, DIM = 13, kit.pick(32, 10)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.fc = nn.Linear(DIM, DIM)

    def forward(self, x):
        return x + self.fc(F.gelu(self.norm(x)))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def shard(model, fully_shard, **kw):
    for block in model.blocks:
        fully_shard(block, **kw)
    return fully_shard(model, **kw)


def loss_of(model, tokens):
    return F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())


# %% [markdown]
# ## 1. The norm of a shard is not the norm
# One backward on 2 ranks; then each rank's norm of its own rows (`to_local()`: the
# plain shard), the global norm `clip_grad_norm_` returns on minidp's shards, and — the
# reference — the norm of the full averaged gradients of torch's DDP on the same data.


# %%
def clip_lesson(rank: int, world: int) -> dict:
    torch.manual_seed(0)
    data = torch.randint(0, VOCAB, (4, 9), generator=torch.Generator().manual_seed(rank))
    out = {}
    model = shard(TinyLM(), minidp.fully_shard)
    loss_of(model, data).backward()
    grads = [p.grad for p in model.parameters()]
    out["local"] = torch.linalg.vector_norm(torch.stack([g.to_local().norm() for g in grads]))
    out["global"] = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM).full_tensor()
    out["clipped"] = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    out["clipped"] = out["clipped"].full_tensor()
    torch.manual_seed(0)
    ddp = torch.nn.parallel.DistributedDataParallel(TinyLM())
    loss_of(ddp, data).backward()
    out["ddp"] = torch.nn.utils.clip_grad_norm_(ddp.parameters(), MAX_NORM)
    if not kit.why_no_fsdp2():
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        theirs = shard(TinyLM(), fully_shard, mesh=init_device_mesh("cpu", (world,)))
        loss_of(theirs, data).backward()
        out["fsdp2"] = torch.nn.utils.clip_grad_norm_(theirs.parameters(), MAX_NORM)
        out["fsdp2"] = out["fsdp2"].full_tensor()
    return out


if __name__ == "__main__":
    kit.title("Lesson 32: clipping and accumulation with sharded gradients")
    # one world of rank processes for the three sections (starting one costs seconds)
    ranks = kit.world(clip_lesson, WORLD)
    res = ranks.run(clip_lesson)
    for rank, r in enumerate(res):
        print(f"  rank {rank}: norm of its own shard {r['local'].item():.6f}, global norm "
              f"{r['global'].item():.6f}, torch DDP's {r['ddp'].item():.6f}")  # fmt: skip
    kit.check_true(
        "each rank alone sees only part of the norm (the parts differ)",
        res[0]["local"].item() != res[1]["local"].item()
        and all(r["local"] < r["global"] for r in res),
    )
    kit.check("clip_grad_norm_ returns the same global norm on every rank", res[0]["global"],
              res[1]["global"])  # fmt: skip
    # not bit for bit: DDP's norm sums the squares in one tensor, the sharded norm per rank
    # then across ranks: another order of additions (measured ~1e-7 relative)
    kit.check("the global norm is torch DDP's (full gradients)", res[0]["global"],
              res[0]["ddp"], exact=False, rtol=1e-6, atol=0.0)  # fmt: skip
    kit.check_true(
        f"after clipping the norm is max_norm ({MAX_NORM}) on every rank",
        all(abs(r["clipped"].item() - MAX_NORM) < 1e-5 for r in res),
    )
    if "fsdp2" in res[0]:
        kit.check("the global norm is FSDP2's (DTensor)", [r["global"] for r in res],
                  [r["fsdp2"] for r in res])  # fmt: skip

# %% [markdown]
# ## 2. Accumulating without a reduce-scatter per micro-batch
# Two micro-batches per step, three ways, each in minidp and in FSDP2 (the weights compared
# bit for bit), the bytes of the second step measured:
#
# * sync every backward: each micro-batch's backward reduce-scatters its gradients;
# * `set_requires_gradient_sync(False)` for the first: only the last backward
#   reduce-scatters, the sum of both;
# * and `set_reshard_after_backward(False)` for the first too: the units also stay gathered
#   after its backward, so the next forward gathers nothing.
#
# Beside them, one micro-batch's collectives one kind at a time: a model with
# `reshard_after_forward=False` keeps every unit gathered from its forward to its backward,
# so its forward sends only the all-gathers and its backward only the reduce-scatters.

# %%
HOWS = ("sync every backward", "sync the last only", "sync the last only, stay gathered")


def accumulate(model, opt, micro: list, how: str, steps: int = 2) -> list:
    """``steps`` optimizer steps of ``len(micro)`` micro-batches each, accumulated ``how``;
    returns, after each skipped sync, the bytes of the ``.grad``s ``model.parameters()``
    hold (None: no parameter has one)."""
    held = []
    for _ in range(steps):
        for i, tokens in enumerate(micro):
            last = i == len(micro) - 1
            if how != "sync every backward":
                model.set_requires_gradient_sync(last)
            if how == "sync the last only, stay gathered":
                model.set_reshard_after_backward(last)  # True again before the step
            loss_of(model, tokens).backward()
            if not last and how != "sync every backward":
                grads = [p.grad for p in model.parameters() if p.grad is not None]
                held.append(sum(g.nbytes for g in grads) if grads else None)  # global
        opt.step()
        opt.zero_grad()
    return held


def shard_grad_bytes(model) -> int:
    """The bytes of ``.grad`` this rank holds: each sharded gradient is a DTensor, whose
    ``nbytes`` is the global tensor's; ``to_local()`` is this rank's rows."""
    return sum(p.grad.to_local().nbytes for p in model.parameters() if p.grad is not None)


def padded_shard_bytes(model, world: int) -> int:
    """One rank's padded shard of every parameter: ``ceil(rows / world)`` rows, float32."""
    return sum(4 * -(-p.shape[0] // world) * p[0].numel() for p in model.parameters())  # global


def accumulate_lesson(rank: int, world: int) -> dict:
    g = torch.Generator().manual_seed(10 + rank)
    micro = [torch.randint(0, VOCAB, (2, 9), generator=g) for _ in range(2)]
    out: dict = {"held": {}}
    for how in HOWS:
        torch.manual_seed(0)
        model = shard(TinyLM(), minidp.fully_shard)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        accumulate(model, opt, micro, how, steps=1)
        before = traffic(model).sent_bytes
        out["held"]["minidp", how] = accumulate(model, opt, micro, how, steps=1)
        out[how] = {
            "bytes": traffic(model).sent_bytes - before,  # the second step's
            "weights": minidp.fsdp.full_state_dict(model),
        }
    torch.manual_seed(0)  # forward: the all-gathers; backward: only the reduce-scatters
    model = shard(TinyLM(), minidp.fully_shard, reshard_after_forward=False)
    loss = loss_of(model, micro[0])
    out["forward all-gathers"] = traffic(model).sent_bytes
    loss.backward()
    out["reduce-scatter"] = traffic(model).sent_bytes - out["forward all-gathers"]
    out["shard grad bytes"] = shard_grad_bytes(model)
    if not kit.why_no_fsdp2():
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        for how in HOWS[1:]:
            torch.manual_seed(0)
            theirs = shard(TinyLM(), fully_shard, mesh=init_device_mesh("cpu", (world,)))
            opt = torch.optim.AdamW(theirs.parameters(), lr=1e-2)
            out["held"]["fsdp2", how] = accumulate(theirs, opt, micro, how)
            out["fsdp2", how] = {n: p.full_tensor().detach() for n, p in theirs.named_parameters()}
    return out


if __name__ == "__main__":
    acc = ranks.run(accumulate_lesson)
    r0 = acc[0]
    every, last, kept = (r0[how]["bytes"] for how in HOWS)
    rs, fwd = r0["reduce-scatter"], r0["forward all-gathers"]
    print("  bytes sent by rank 0 in one step of 2 micro-batches:")
    for how in HOWS:
        print(f"    {how:<36}{r0[how]['bytes']:>8,}  ({r0[how]['bytes'] / every - 1:+.0%})")
    print(f"  one micro-batch alone: forward all-gathers {fwd:,} B, reduce-scatters {rs:,} B; "
          f"so the backward all-gathers {(last - rs) // 2 - fwd:,} B")  # fmt: skip
    kit.check_true(
        "skipping the first micro-batch's sync saves exactly one micro-batch's reduce-scatters",
        every - last == rs,
        f"{every:,} - {last:,} = {every - last:,} B vs {rs:,} B measured alone",
    )
    kit.check_true(
        "staying gathered after the first backward saves exactly the second forward's all-gathers",
        last - kept == fwd,
        f"{last:,} - {kept:,} = {last - kept:,} B vs {fwd:,} B measured alone",
    )
    full = 4 * sum(p.numel() for p in TinyLM().parameters())  # global: the whole gradient
    shards = [r["shard grad bytes"] for r in acc]
    padded = padded_shard_bytes(TinyLM(), WORLD)
    held = {key: v for r in acc for key, v in r["held"].items()}
    print(f"  after the first micro-batch's backward without sync, model.parameters() hold "
          f"no .grad (resharded) or {held['minidp', HOWS[2]][0]:,} B of .grad (stayed "
          f"gathered): the full gradient, {full:,} B; a synced rank holds its own shard "
          f"(to_local()): {' and '.join(f'{b:,}' for b in shards)} B on ranks 0 and 1")  # fmt: skip
    kit.check_true(
        "a synced rank holds only its shard: the ranks' shards add up to the full gradient, "
        f"each at most its padded 1/{WORLD} ({padded:,} B, within {padded * WORLD - full:,} B "
        f"of padding of {full:,} / {WORLD})",
        sum(shards) == full
        and all(padded - (padded * WORLD - full) <= b <= padded for b in shards),
        f"{shards} B",
    )
    kit.check_true(
        "no sync: no sharded .grad exists between micro-batches (minidp and FSDP2, every rank)"
        " — the sum is held unsharded",
        all(v == [None] * len(v) and v for (_, how), v in held.items() if how == HOWS[1]),
    )
    kit.check_true(
        "no sync, stay gathered: the gathered parameters hold the full gradient on every rank "
        "(minidp and FSDP2), all the ranks' shards together",
        all(v == [full] * len(v) and v for (_, how), v in held.items() if how == HOWS[2]),
        f"{full:,} B vs {shards} B",
    )
    if ("fsdp2", HOWS[1]) in r0:
        for rank, r in enumerate(acc):
            for how in HOWS[1:]:
                kit.check(f"rank {rank}, {how}: minidp = FSDP2", r[how]["weights"],
                          r["fsdp2", how])  # fmt: skip
    else:
        print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")

# %% [markdown]
# **Why only 18% fewer bytes.** A step's reduce-scatters are one part of its traffic; the
# all-gathers are the larger part, and they happen in every micro-batch whatever the sync:
# the forward gathers every unit, and the backward gathers every block again. Skipping the
# first reduce-scatter saves one micro-batch's reduce-scatters and nothing else.
#
# **What it costs.** Between micro-batches there is no sharded `.grad` yet: the sum so far
# is kept *unsharded* — the full gradient of every unit, on every rank: all the ranks'
# shards together. FSDP2 keeps that sum in `reduce_dtype` (`to_accumulated_grad_if_needed`
# upcasts each micro-batch's gradient before adding it): for Qwen2.5-14B under
# `MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)` — or
# without mixed precision — 14.7 B × 4 bytes = 55 GiB per GPU instead of 55/N (27 GiB with a
# bf16 `reduce_dtype`): ZeRO-1's gradient memory, for the length of the accumulation. The
# alternatives, by what they trade:
#
# * **reduce-scatter every micro-batch** (the default): each rank holds only its gradient
#   shard; one reduce-scatter per micro-batch — the choice when memory is what is short;
# * **`set_reshard_after_backward(False)`** with the sync off: the units stay gathered too,
#   so the next forward gathers nothing (with `reshard_after_forward=False` as well, a
#   micro-batch sends nothing at all) — the least traffic, for the memory of the whole
#   unsharded model *and* its gradient. Set both back to `True` before the last backward.

# %% [markdown]
# ## 3. ZeRO-2: the full gradient is gone — what does `clip_grad_norm_` see?
# ZeRO-2 (lesson 20) reduce-scatters each gradient during backward and *frees* the full
# `.grad`: that is its saving. A `.grad` of `None` would make `clip_grad_norm_` see no
# gradients at all: norm 0, nothing clipped, no error. So minidp leaves in `.grad` what
# FSDP2 has there, a DTensor of this rank's rows of the reduced gradient (the parameter's
# shape, ``Shard(0)``). Its norm is a partial norm, like a shard's in section 1; scaling it
# scales the rows the optimizer will step. The torch reference is FSDP2 with
# `reshard_after_forward=False` (parameters stay gathered between forward and backward:
# ZeRO-2's layout). `opt.no_sync()` accumulates as in section 2.


# %%
def zero2_lesson(rank: int, world: int) -> dict:
    data = torch.randint(0, VOCAB, (4, 9), generator=torch.Generator().manual_seed(rank))
    torch.manual_seed(0)
    model = TinyLM()
    opt = Zero2Optimizer(model.parameters(), torch.optim.AdamW, lr=1e-2)
    loss_of(model, data).backward()
    grad = model.head.weight.grad
    shape = tuple(grad.shape)  # global: the whole gradient's
    rows = tuple(grad.to_local().shape)
    out = {"grad": f"a {type(grad).__name__}, {grad.placements}, shape {shape}, rows {rows} here"}
    out["norm"] = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM).full_tensor()
    opt.step()
    out["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    if not kit.why_no_fsdp2():
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        mesh = init_device_mesh("cpu", (world,))
        theirs = fully_shard(TinyLM(), mesh=mesh, reshard_after_forward=False)
        topt = torch.optim.AdamW(theirs.parameters(), lr=1e-2)
        loss_of(theirs, data).backward()
        norm = torch.nn.utils.clip_grad_norm_(theirs.parameters(), MAX_NORM)
        out["fsdp2_norm"] = norm.full_tensor()
        topt.step()
        out["fsdp2"] = {n: p.full_tensor().detach() for n, p in theirs.named_parameters()}
    return out


if __name__ == "__main__":
    z2 = ranks.run(zero2_lesson)
    ranks.close()
    print(f"  rank 0's head.weight.grad after backward: {z2[0]['grad']}")
    print(f"  clip_grad_norm_ on every rank: {[round(r['norm'].item(), 6) for r in z2]}")
    kit.check("ZeRO-2: clip_grad_norm_ returns the same global norm on every rank",
              z2[0]["norm"], z2[1]["norm"])  # fmt: skip
    if "fsdp2" in z2[0]:
        kit.check("ZeRO-2's norm is FSDP2's (reshard_after_forward=False)",
                  [r["norm"] for r in z2], [r["fsdp2_norm"] for r in z2])  # fmt: skip
        kit.check("ZeRO-2's clipped step is FSDP2's, every weight",
                  [r["weights"] for r in z2], [r["fsdp2"] for r in z2])  # fmt: skip
    kit.done()
    print(
        "Exercise: clip by the global norm of sharded gradients yourself — python -m minidp exercise check clip_grad_norm_shards"
    )

# %% [markdown]
# Both sums are the same mathematics, not the same bits: reducing every micro-batch adds
# two averages, reducing once averages one sum. Clipping then sees the global norm on every
# rank, so every rank scales by the same factor. Next: `tests/training_matrix.py` lists
# every wrapper × every ordinary move and the test that checks it against torch.
