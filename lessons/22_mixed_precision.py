# %% [markdown]
# # Lesson 22 — mixed precision under FSDP: bf16 compute, fp32 master weights
#
# Run: `python lessons/22_mixed_precision.py`
#
# Lesson 21 sharded fp32 parameters. Most training today computes in **bfloat16**: half
# the bytes to gather, half the activations, and fast matrix units on GPUs. But bf16 keeps
# only 8 significant bits, so a small update to a weight can vanish. The answer FSDP (and
# `torch.distributed.fsdp.MixedPrecisionPolicy`) gives:
#
# * the **sharded** parameters stay fp32 — the "master weights" the optimizer steps;
# * `param_dtype=torch.bfloat16`: each shard is cast to bf16 *before* the all-gather, so
#   the forward and backward run on bf16 copies and the gather moves half the bytes;
# * `reduce_dtype`: the dtype of the gradient reduce-scatter; the reduced gradient is cast
#   back to fp32 and lands on the fp32 shard. Left unset (`None`), its meaning depends on
#   the torch release: up to 2.14 the gradients' own dtype (bf16 sums), from 2.15 the
#   master weights' dtype (the bf16 gradients are upcast, then summed in fp32). This
#   lesson shows both and which one your torch uses.
#
# So FSDP2's layout is **4 + 4 + 8** bytes per AdamW parameter (fp32 shard, fp32 gradient,
# fp32 moments), sharded, plus bf16 copies of the units gathered at the moment. The ZeRO
# paper's mixed precision, counted in lessons 18 and 23, is **2 + 2 + 12** (bf16 weights
# and gradients, fp32 master copy and moments): the same 16 bytes, split differently. The
# planner names which it counts (`python -m minidp memory --precision fsdp2-bf16` for this
# one; lesson 23 measures it against the planner).
#
# Here: why the master weights must stay fp32, what the policy changes (dtypes and bytes
# measured), and minidp's policy against FSDP2's, bit for bit.

# %%
import kit
import torch
import torch.nn.functional as F
from torch import nn

import minidp
from minidp.fsdp import full_state_dict, traffic
from minidp.fsdp.policy import UNSET_REDUCES_IN_PARAM_DTYPE

WORLD = 2
VOCAB, DIM, BLOCKS = kit.pick((256, 128, 3), (64, 32, 2))
BATCH, SEQ, STEPS = kit.pick((8, 64, 5), (4, 16, 3))
POLICIES = {  # name: (param_dtype, reduce_dtype)
    "fp32": (None, None),
    "bf16": (torch.bfloat16, torch.bfloat16),
    "bf16, fp32 reduce": (torch.bfloat16, torch.float32),
    "bf16, reduce unset": (torch.bfloat16, None),
}
# the row that `reduce_dtype=None` is, on the installed torch (minidp follows torch's rule)
UNSET_IS = "bf16" if UNSET_REDUCES_IN_PARAM_DTYPE else "bf16, fp32 reduce"

# %% [markdown]
# ## 1. Why the master weights stay fp32
# bf16 has the range of fp32 but 8 significant bits: just above 1.0 the bf16 numbers are
# 2^-7 apart (2^-8 just below). An update of 0.001 to a weight of 1.0 is *lost* in bf16.

# %%
if __name__ == "__main__":
    kit.title("Lesson 22: mixed precision under FSDP")
    w = torch.tensor(1.0)
    update = torch.tensor(1e-3)
    in_bf16 = (w.bfloat16() - update.bfloat16()).float()
    in_fp32 = w - update
    print(f"  1.0 - 0.001 in bf16: {in_bf16.item()!r};  in fp32: {in_fp32.item()!r}")
    spacing = (torch.tensor(1.0).bfloat16().nextafter(torch.tensor(2.0).bfloat16()) - 1).item()
    print(f"  bf16 spacing just above 1.0: {spacing!r} (2^-7)")
    print("  so: step fp32 master weights, compute with bf16 copies of them")
    # (facts about torch's number formats, shown, not checked: the checks below test what
    # this lesson builds — the policy's dtypes, bytes and weights against FSDP2's)


# %% [markdown]
# ## 2. The policy on 2 ranks
# The same small transformer-like model as lesson 21, sharded per block, trained with
# AdamW under each policy — in minidp and in FSDP2 (torch >= 2.8: gloo's reduce-scatter).


# %%
class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block(DIM) for _ in range(BLOCKS))
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def train(model, data, seen: dict | None = None) -> list[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for tokens in data:
        opt.zero_grad()
        logits = model(tokens[:, :-1])
        if seen is not None:  # what the forward computed with, and what the optimizer steps
            seen["logits"] = logits.dtype
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        if seen is not None:
            shard = model.blocks[0].fc1.weight  # after backward: the fp32 shard again
            seen["shard"], seen["grad"] = shard.dtype, shard.grad.dtype
        opt.step()
        losses.append(loss.item())
    return losses


def policy_lesson(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(10 + rank)
    data = [torch.randint(0, VOCAB, (BATCH, SEQ), generator=g) for _ in range(STEPS)]
    out = {}
    for name, (param_dtype, reduce_dtype) in POLICIES.items():
        torch.manual_seed(0)
        model = TinyLM()
        policy = minidp.MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
        seen: dict = {}

        def capture(module, args, seen=seen):
            seen["gathered"] = module.fc1.weight.dtype  # inside the unit's forward: unsharded

        for block in model.blocks:
            minidp.fully_shard(block, mp_policy=policy)
        minidp.fully_shard(model, mp_policy=policy)
        # registered after fully_shard's own pre-hook, so it runs after the all-gather
        model.blocks[0].register_forward_pre_hook(capture)
        before = traffic(model)
        losses = train(model, data, seen)
        after = traffic(model)
        out[name] = {
            "losses": losses,
            "seen": seen,
            "sent_per_step": (after.sent_bytes - before.sent_bytes) / STEPS,
            "params": full_state_dict(model),
        }
        if not kit.why_no_fsdp2():
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            torch.manual_seed(0)
            ref = TinyLM()
            mesh = init_device_mesh("cpu", (world,))
            theirs = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
            for block in ref.blocks:
                fully_shard(block, mesh=mesh, mp_policy=theirs)
            fully_shard(ref, mesh=mesh, mp_policy=theirs)
            train(ref, data)
            out[name]["fsdp2"] = {n: p.full_tensor().detach() for n, p in ref.named_parameters()}
    return out


if __name__ == "__main__":
    res = kit.spawn(policy_lesson, WORLD)
    r0 = res[0]
    print(f"  {'policy':<18} {'gathered':>10} {'logits':>10} {'shard':>9} {'shard grad':>11} "
          f"{'bytes sent/step':>16}")  # fmt: skip
    for name, r in r0.items():
        s = r["seen"]
        print(f"  {name:<18} {str(s['gathered'])[6:]:>10} {str(s['logits'])[6:]:>10} "
              f"{str(s['shard'])[6:]:>9} {str(s['grad'])[6:]:>11} {r['sent_per_step']:>16,.0f}")  # fmt: skip
    bf16 = r0["bf16"]["seen"]
    kit.check_true(
        "bf16 policy: forward computes with bf16 copies", bf16["logits"] == torch.bfloat16
    )
    kit.check_true(
        "bf16 policy: the shards and their gradients stay fp32",
        bf16["shard"] == torch.float32 and bf16["grad"] == torch.float32,
    )
    ratio = r0["bf16"]["sent_per_step"] / r0["fp32"]["sent_per_step"]
    kit.check_true(
        "bf16 gathers and reduces move about half the bytes (plus fixed headers)",
        0.5 <= ratio < 0.65,
        f"bf16 / fp32 = {ratio:.2f}",
    )
    ratio_fp32_reduce = r0["bf16, fp32 reduce"]["sent_per_step"] / r0["fp32"]["sent_per_step"]
    kit.check_true(
        "fp32 reduce_dtype: the reduce-scatter moves fp32 again (in between)",
        ratio < ratio_fp32_reduce < 1.0,
        f"{ratio_fp32_reduce:.2f}",
    )
    unset = r0["bf16, reduce unset"]
    print(f"  torch {torch.__version__}: reduce_dtype=None reduces like the {UNSET_IS!r} row")
    kit.check_true(
        f"reduce_dtype unset: the same bytes and weights as {UNSET_IS!r} on this torch",
        unset["sent_per_step"] == r0[UNSET_IS]["sent_per_step"]
        and all(torch.equal(unset["params"][n], t) for n, t in r0[UNSET_IS]["params"].items()),
    )

# %% [markdown]
# The numbers: the gathered weights and the logits are bf16, while the shards and their
# `.grad` stay fp32. Bytes per step are about halved under bf16 (both all-gathers and the
# reduce-scatter), not exactly: minidp's header check adds a few bytes per collective.
# An fp32 `reduce_dtype` sums the gradients without bf16 rounding for the price of fp32
# bytes in the reduce-scatter — the trade torch 2.15 made its default when `reduce_dtype`
# is left unset (on 2.14 and before, unset meant bf16 sums). Name the dtype you want
# rather than rely on the default: it changed once.
#
# ## 3. The price, and PyTorch's answer
# bf16 compute changes the trajectory; the loss after a few steps stays close. And the
# policy is FSDP2's, bit for bit: the same casts at the same places (cast the fp32 shard
# to bf16 before the all-gather, reduce in `reduce_dtype`, cast the reduced gradient to
# fp32, accumulate into the shard's `.grad`).

# %%
if __name__ == "__main__":
    for name, r in r0.items():
        print(f"  {name:<18} losses: " + ", ".join(f"{x:.4f}" for x in r["losses"]))
    drift = max(abs(a - b) for a, b in zip(r0["bf16"]["losses"], r0["fp32"]["losses"]))
    kit.check_true("bf16 changes the losses, a little", 0 < drift < 0.1, f"max |diff| {drift:.4f}")
    for rank, r in enumerate(res):
        for name in POLICIES:
            if "fsdp2" in r[name]:
                kit.check(
                    f"rank {rank}, {name}: minidp vs FSDP2 MixedPrecisionPolicy",
                    r[name]["params"],
                    r[name]["fsdp2"],
                )
    if "fsdp2" not in r0["fp32"]:
        print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")
    kit.done()
    print(
        "Exercise: DDP's fp16 compression hook yourself — python -m minidp exercise check fp16_compress_hook"
    )
