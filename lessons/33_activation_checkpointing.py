# %% [markdown]
# # Lesson 33 — activation checkpointing, and what it does under FSDP
#
# Run: `python lessons/33_activation_checkpointing.py`
#
# Lesson 23 planned the *model states* and left activations out. Activations are what
# backward needs from the forward: a Linear keeps its input, a softmax its output, GELU
# its input... They grow with micro-batch × sequence, and data parallelism does not shard
# them — every rank keeps its own micro-batch's.
#
# **Activation checkpointing** (`torch.utils.checkpoint.checkpoint(block, x)`) keeps only
# the block's *input*; backward runs the block's forward again (the *recompute*) to get the
# rest, one block at a time. Memory: L·(one input) + one block, instead of L·(one block).
# Price: one more forward per step (~1/3 more compute).
#
# Under FSDP the recompute needs the block's full weights. FSDP2 gathers a unit when
# backward reaches it anyway, so a checkpointed *unit* recomputes while gathered: no extra
# all-gather. Here: the bytes kept, measured with `saved_tensors_hooks` against the
# estimate in `minidp/tools/planner/activations.py` (Korthikanti et al., 2022); the same bits with
# and without checkpointing; minidp and FSDP2 with checkpointing on 2 ranks, all-gathers
# counted; and the planner's numbers for a real model.

# %%
import math
import warnings

import kit
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import minidp
from minidp import trace
from minidp.tools.planner import plan
from minidp.tools.planner.activations import logits_bytes, stack_bytes

WORLD, STEPS = 2, 2
VOCAB, DIM, HEADS, BLOCKS = kit.pick((64, 64, 4, 4), (32, 32, 4, 3))
BATCH, SEQ = kit.pick((4, 32), (2, 16))
CKPT = {"mode": "none"}  # how TinyLM.forward checkpoints: "none", "block" or "pair"
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")


class Block(nn.Module):
    """A GPT-style layer written as the estimate counts it: LayerNorm, separate q/k/v,
    explicit softmax (no dropout), GELU MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.q, self.k, self.v, self.o = (nn.Linear(DIM, DIM) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):  # (b, s, h)
        b, s, h = x.shape
        y = self.norm1(x)
        q, k, v = (m(y).view(b, s, HEADS, -1).transpose(1, 2) for m in (self.q, self.k, self.v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(h // HEADS)  # (b, heads, s, s)
        att = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + self.o(att)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(DIM, VOCAB)

    def run_blocks(self, x):
        blocks = list(self.blocks)
        if CKPT["mode"] == "pair":  # one checkpointed region spanning blocks 0 and 1
            first, second = blocks[0], blocks[1]
            x = checkpoint(lambda y: second(first(y)), x, use_reentrant=False)
            blocks = blocks[2:]
        for block in blocks:
            x = checkpoint(block, x, use_reentrant=False) if CKPT["mode"] == "block" else block(x)
        return x

    def forward(self, tokens):
        return self.head(self.run_blocks(self.emb(tokens)))


def make_model() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM()


def loss_of(model, tokens):
    return F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())


def kept_bytes(model: TinyLM, x: torch.Tensor) -> int:
    """Bytes of the distinct storages the blocks save for backward (parameters excluded:
    a Linear saves its weight too, which is a model state, not an activation)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.run_blocks(x)
    return sum(kept.values())


# %% [markdown]
# ## 1. What backward keeps, measured and estimated
# `saved_tensors_hooks(pack, unpack)` sees every tensor an op saves for backward. Summed
# over distinct storages for the block stack (input `(b, s-1, h)` from the embedding),
# beside `stack_bytes(...)`: the paper's `s·b·h·(16d) + d·a·s²·b` per layer here (fp32:
# d = 4; no dropout). It leaves out LayerNorm's mean and 1/std (b·s values each, two norms
# per block): the measurement is exactly that much larger. Then the head: the logits, and
# the fp32 log-probabilities `cross_entropy` keeps for backward (`logits_bytes`).

# %%
if __name__ == "__main__":
    kit.title("Lesson 33: activation checkpointing, and FSDP")
    model = make_model()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    x = model.emb(tokens[:, :-1])  # (b, s, h): the blocks' input, an activation itself
    s = SEQ - 1
    est = {m: stack_bytes(BLOCKS, s, BATCH, DIM, HEADS, bytes_per_value=4, checkpointing=m)
           for m in ("none", "full")}  # fmt: skip
    measured = {}
    for mode, key in (("none", "none"), ("block", "full")):
        CKPT["mode"] = mode
        measured[key] = kept_bytes(model, x)
        print(f"  checkpointing {key:<4}: kept {measured[key]:>9,} B, estimate "
              f"{est[key].kept:>9,} B; backward peak (estimate) {est[key].peak:,} B")  # fmt: skip
    stats = BLOCKS * 2 * 2 * s * BATCH * 4  # LayerNorm mean and 1/std, fp32, two per block
    kit.check_true(
        "no checkpointing: measured = estimate + LayerNorm statistics, to the byte",
        measured["none"] == est["none"].kept + stats,
        f"{measured['none']:,} = {est['none'].kept:,} + {stats:,}",
    )
    kit.check_true(
        "checkpointing every block keeps only each block's input (L·s·b·h·4 bytes)",
        measured["full"] == est["full"].kept,
        f"{measured['full']:,} B, {measured['none'] / measured['full']:.1f}x less",
    )
    logits = model.head(model.run_blocks(x))  # (b, s, vocab)
    saved: dict[int, torch.Tensor] = {}
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: saved.setdefault(t.untyped_storage().data_ptr(), t), lambda t: t
    ):
        F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
    log_probs = [t for t in saved.values() if t.numel() == logits.numel()]  # (b·s, vocab) fp32
    head = logits.untyped_storage().nbytes() + sum(t.untyped_storage().nbytes() for t in log_probs)
    print(f"  the logits and the loss's log-probabilities: {head:,} B measured, "
          f"{logits_bytes(s, BATCH, VOCAB, bytes_per_value=4):,} B estimated")  # fmt: skip
    kit.check_true(
        "the loss keeps fp32 log-probabilities of the logits' size: logits_bytes, to the byte",
        head == logits_bytes(s, BATCH, VOCAB, bytes_per_value=4),
    )

# %% [markdown]
# ## 2. Same bits, one more forward
# The recompute runs the same ops on the same inputs, so loss and gradients are identical
# to not checkpointing (deterministic CPU kernels). A forward pre-hook counts the blocks'
# forwards.

# %%
if __name__ == "__main__":
    results, calls = {}, {}
    for mode in ("none", "block"):
        CKPT["mode"] = mode
        model, n = make_model(), [0]
        for block in model.blocks:
            # a pre-hook: the recompute stops early, once it has what backward needs
            block.register_forward_pre_hook(lambda *_, n=n: n.__setitem__(0, n[0] + 1))
        loss = loss_of(model, tokens)
        loss.backward()
        results[mode] = [loss.detach()] + [p.grad for p in model.parameters()]
        calls[mode] = n[0]
    print(
        f"  block forwards per step: {calls['none']} without, {calls['block']} with checkpointing"
    )
    kit.check("checkpointed loss and gradients = plain ones", results["block"], results["none"])
    kit.check_true("checkpointing runs every block's forward twice",
                   calls["block"] == 2 * calls["none"] == 2 * BLOCKS)  # fmt: skip

# %% [markdown]
# ## 3. Checkpointing under FSDP, 2 ranks: minidp and FSDP2
# Each block is an FSDP unit. Three ways, each trained `STEPS` AdamW steps by
# `minidp.fully_shard` and by FSDP2's `fully_shard`: no checkpointing; checkpoint around
# each unit; one checkpoint around units 1 and 2 together (a region spanning two units).
# All-gathers are counted: minidp's from its trace (`all-gather unit k` spans), FSDP2's by
# counting calls of `dist.all_gather_single`, which its `DefaultAllGather` calls.


# %%
def shard_all(model, fully_shard, **kw):
    for block in model.blocks:
        fully_shard(block, **kw)
    return fully_shard(model, **kw)


def fsdp_lesson(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(10 + rank)
    data = [torch.randint(0, VOCAB, (BATCH, SEQ), generator=g) for _ in range(STEPS)]
    out: dict = {}
    libs = ("minidp",) if kit.why_no_fsdp2() else ("minidp", "fsdp2")
    for mode in ("none", "block", "pair"):
        CKPT["mode"] = mode
        for lib in libs:
            n = [0]  # FSDP2's all-gathers: calls of dist.all_gather_single, counted
            if lib == "minidp":
                model = shard_all(make_model(), minidp.fully_shard)
            else:  # (imported here: FSDP2 is public from torch 2.6)
                from torch.distributed.device_mesh import init_device_mesh
                from torch.distributed.fsdp import fully_shard

                model = shard_all(make_model(), fully_shard, mesh=init_device_mesh("cpu", (world,)))
                # (torch 2.11 and before: FSDP2 calls all_gather_into_tensor)
                new = hasattr(dist, "all_gather_single")
                name = "all_gather_single" if new else "all_gather_into_tensor"
                original = getattr(dist, name)

                def counted(*args, n=n, original=original, **kwargs):
                    n[0] += 1
                    return original(*args, **kwargs)

                setattr(dist, name, counted)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            try:
                with trace.recording() as rec:
                    for tokens in data:
                        loss_of(model, tokens).backward()
                        opt.step()
                        opt.zero_grad()
            finally:
                if lib != "minidp":
                    setattr(dist, name, original)
            ours = sum(e["name"].startswith("all-gather") for e in rec.events)
            if lib == "minidp":
                weights = minidp.fsdp.full_state_dict(model)
            else:
                weights = {k: p.full_tensor().detach() for k, p in model.named_parameters()}
            out[mode, lib] = {"gathers": ours if lib == "minidp" else n[0], "weights": weights}
    return out


if __name__ == "__main__":
    res = kit.spawn(fsdp_lesson, WORLD)
    r0 = res[0]
    for (mode, lib), r in r0.items():
        print(f"  {mode:<5} {lib:<6}: {r['gathers']} all-gathers in {STEPS} steps")
    for rank, r in enumerate(res):
        kit.check(f"rank {rank}: minidp with checkpointed units = without",
                  r["block", "minidp"]["weights"], r["none", "minidp"]["weights"])  # fmt: skip
    per_step = 1 + 2 * BLOCKS  # the root once (it stays gathered), each unit fwd + bwd
    kit.check_true(
        "checkpointing each unit adds no all-gather (recompute while gathered for backward)",
        r0["block", "minidp"]["gathers"] == r0["none", "minidp"]["gathers"] == STEPS * per_step,
        f"{r0['block', 'minidp']['gathers']} = {STEPS} x (1 + 2 x {BLOCKS})",
    )
    if "fsdp2" in [lib for _, lib in r0]:
        for mode in ("block", "pair"):
            for rank, r in enumerate(res):
                kit.check(f"rank {rank}, checkpoint per {mode}: minidp = FSDP2",
                          r[mode, "minidp"]["weights"], r[mode, "fsdp2"]["weights"])  # fmt: skip
        kit.check_true(
            "checkpointing each unit: minidp's all-gathers = FSDP2's",
            r0["block", "minidp"]["gathers"] == r0["block", "fsdp2"]["gathers"],
        )
        kit.check_true(
            "FSDP2: a region over two units adds no all-gather either",
            r0["pair", "fsdp2"]["gathers"] == r0["none", "fsdp2"]["gathers"],
        )
        kit.check_true(
            "minidp: a region over two units adds no all-gather either (= FSDP2)",
            r0["pair", "minidp"]["gathers"] == r0["pair", "fsdp2"]["gathers"],
            f"{r0['pair', 'minidp']['gathers']} vs {r0['pair', 'fsdp2']['gathers']}",
        )
    else:
        print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")

# %% [markdown]
# Why a region over two units costs no extra all-gather: backward reaches the region's
# output, gathers unit 2, and the recompute runs unit 1's forward, which gathers unit 1.
# That forward runs *inside* a backward, so unit 1 stays gathered for its own backward,
# which comes next: FSDP2 asks autograd (`torch._C._current_graph_task_id() != -1`, its
# `is_bw()`); minidp knows it from its own hooks (a gradient has reached a unit's output
# this step: `Root.recomputing`). An earlier minidp freed unit 1 after the recompute, as
# after any forward, and gathered it again for its backward: the same numbers, one
# all-gather more per step — this lesson's check caught it.

# %% [markdown]
# ## 4. The planner's numbers: Qwen2.5-14B
# Lesson 23's model, bf16 activations, a fused attention kernel (no s² scores), SwiGLU,
# grouped-query attention (40 query heads share 8 k/v heads: k and v are 1/5 the size), one
# sequence of 4096 tokens per GPU, 48 layers; model states under each stage on 8 × 80 GiB,
# DDP's gradient buckets counted (torch's default `gradient_as_bucket_view=False`).
# Activations are per GPU whatever the number of GPUs. On top of the layers come the
# logits: 152,064 vocabulary entries for each of the 4096 tokens, in bf16 from the output
# head and again in fp32, the log-probabilities the loss keeps (section 1 measured both).

# %%
if __name__ == "__main__":
    GIB = plan.GIB
    qwen = dict(seq=4096, batch=1, hidden=5120, heads=40, ffn=13824, mlp="swiglu", flash=True)
    mha = stack_bytes(48, **qwen)
    logits = logits_bytes(4096, 1, 152064)
    print(f"  one layer: {mha.per_layer / GIB:.2f} GiB if every head had its own k and v, "
          f"{stack_bytes(48, **qwen, kv_heads=8).per_layer / GIB:.2f} GiB with 8 k/v heads; "
          f"logits + log-probabilities {logits / GIB:.1f} GiB")  # fmt: skip
    fits = {}
    for mode in ("none", "full"):
        a = stack_bytes(48, **qwen, kv_heads=8, checkpointing=mode)
        rows = plan.plan(14.7e9, 8, 80, activations_gib=(a.peak + logits) / GIB, buckets=True)
        print(f"\ncheckpointing {mode}: layers kept {a.kept / GIB:.1f} GiB, backward peak "
              f"{a.peak / GIB:.1f} GiB (one layer {a.per_layer / GIB:.2f}); + logits "
              f"{logits / GIB:.1f} GiB")  # fmt: skip
        print(plan.format_plan(rows, 14.7e9, 8, "Qwen2.5-14B", f"activations: {mode}"))
        fits[mode] = {r.stage: r for r in rows}
    zero1 = fits["full"]["zero1"]
    no_buckets = zero1.total - zero1.buckets
    kit.check_true(
        "grouped-query attention: 8.5% fewer activation bytes per layer than 40 k/v heads",
        round(1 - stack_bytes(48, **qwen, kv_heads=8).per_layer / mha.per_layer, 3) == 0.085,
    )
    kit.check_true(
        "checkpointed: the logits (bf16 + fp32 log-probabilities) outweigh the layers' peak",
        logits > stack_bytes(48, **qwen, kv_heads=8, checkpointing="full").peak,
    )
    kit.check_true(
        "checkpointed ZeRO-1 does not fit: not with DDP's buckets, nor without them "
        "(gradient_as_bucket_view=True) once the logits are counted",
        not zero1.fits and no_buckets > 80 * GIB,
        f"{zero1.total / GIB:.1f} GiB with buckets, {no_buckets / GIB:.1f} without, "
        f"{(no_buckets - logits) / GIB:.1f} without the logits either",
    )
    kit.check_true(
        "checkpointed ZeRO-2 and FSDP fit",
        fits["full"]["zero2"].fits and fits["full"]["fsdp"].fits,
    )
    kit.done()

# %% [markdown]
# Without checkpointing the layers' activations (~32 GiB) outweigh FSDP's 8-GPU share of
# the model states (~27 GiB); checkpointing every layer brings their peak to ~2.5 GiB, for
# one more forward per step. Then the logits are the biggest activation left (3.5 GiB: the
# vocabulary is 30x the hidden size) — a fused or chunked cross-entropy that never holds the
# whole `(tokens, vocab)` matrix in fp32 is the next saving. ZeRO-2 and FSDP fit. ZeRO-1 does
# not: its replicated bf16 gradients (27.4 GiB) plus DDP's bucket copy of them (another
# 27.4 GiB unless `gradient_as_bucket_view=True`) — and even without the buckets, 81.3 GiB.
# Selective checkpointing (recompute only the attention scores, the paper's other option)
# sits between; with a fused attention kernel there are no scores to drop.
