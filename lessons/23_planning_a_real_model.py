# %% [markdown]
# # Lesson 23 — Planning a real model: Qwen2.5-14B on two A100s
#
# Run: `python lessons/23_planning_a_real_model.py`
#
# A blog post that this course started from (a Chinese write-up on DP vs DDP) opens with:
# *"running a large-model classification with all parameters frozen, on two A100s, the
# 48-layer Qwen2.5 would not fit — because I used DP."* The 48-layer Qwen2.5 is
# Qwen2.5-14B. Before buying or renting anything, count the bytes:
#
# 1. how many parameters, from the published architecture (and checked on a real torch
#    model of the same shape, scaled down);
# 2. what each GPU must hold under DP/DDP, ZeRO-1, ZeRO-2 and FSDP — frozen, as in the
#    post, and fully fine-tuned with AdamW;
# 3. whether the planner's numbers are what real tensors take (measured on a small model).
#
# The planner is `python -m minidp memory`; activations, the CUDA context and
# fragmentation come on top of everything here. Every size is in GiB (2^30 bytes), the
# unit GPU memory is sold in: an "80 GB" A100 holds 80 GiB.

# %%
import copy
import warnings

import kit
import torch
from torch import nn

import minidp
from minidp.fsdp.dtensor import PlainShardsWarning
from minidp.launch import run_threads
from minidp.tools.planner import plan
from minidp.tools.planner.memory import measure
from minidp.tools.planner.stages import step_and_measure, train_step

# The measurements below run their ranks as threads, whose shards are plain tensors (no
# DTensor): fine for counting bytes, which is all this lesson does with them.
warnings.filterwarnings("ignore", category=PlainShardsWarning)

GIB = plan.GIB

# Qwen2.5-14B's published configuration (config.json on its model card).
QWEN_14B = dict(
    vocab=152064, hidden=5120, layers=48, intermediate=13824, heads=40, kv_heads=8, tied=False
)


def qwen2_param_count(vocab, hidden, layers, intermediate, heads, kv_heads, tied) -> int:
    """Parameters of a Qwen2 decoder: embeddings, per layer attention (q/k/v with bias, o
    without), a gated MLP (gate, up, down), two RMSNorms; a final norm; the LM head."""
    kv = hidden // heads * kv_heads  # grouped-query attention: fewer key/value heads
    attention = hidden * hidden + hidden + 2 * (hidden * kv + kv) + hidden * hidden
    mlp = 3 * hidden * intermediate
    per_layer = attention + mlp + 2 * hidden
    embeddings = vocab * hidden * (1 if tied else 2)
    return embeddings + layers * per_layer + hidden


class Qwen2Layer(nn.Module):
    """The parameter shapes of one Qwen2 decoder layer (enough to count and to train)."""

    def __init__(self, hidden, intermediate, heads, kv_heads) -> None:
        super().__init__()
        self.head_dim = hidden // heads
        kv = self.head_dim * kv_heads
        self.q, self.k, self.v = (
            nn.Linear(hidden, hidden),
            nn.Linear(hidden, kv),
            nn.Linear(hidden, kv),
        )
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)
        self.norm1, self.norm2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (batch, seq, hidden)
        b, t, d = h.shape
        heads, kv_heads = d // self.head_dim, self.k.out_features // self.head_dim
        a = self.norm1(h)
        q = self.q(a).view(b, t, heads, self.head_dim).transpose(1, 2)
        k, v = (x(a).view(b, t, kv_heads, self.head_dim).transpose(1, 2) for x in (self.k, self.v))
        k, v = (x.repeat_interleave(heads // kv_heads, dim=1) for x in (k, v))  # shared heads
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.o(att.transpose(1, 2).reshape(b, t, d))  # (no rotary embedding: no params)
        m = self.norm2(h)
        return h + self.down(nn.functional.silu(self.gate(m)) * self.up(m))


class Qwen2Like(nn.Module):
    def __init__(self, vocab, hidden, layers, intermediate, heads, kv_heads, tied) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            Qwen2Layer(hidden, intermediate, heads, kv_heads) for _ in range(layers)
        )
        self.norm = nn.RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


SMALL = dict(
    vocab=kit.pick(512, 128),
    hidden=64,
    layers=kit.pick(4, 2),
    intermediate=160,
    heads=8,
    kv_heads=2,
    tied=False,
)


def lm_loss(logits, y):
    return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return Qwen2Like(**SMALL)


def stages_on_rank(rank: int, world: int, model: nn.Module) -> dict:
    """One AdamW step of DDP, ZeRO-2, and FSDP with FSDP2's bf16 policy; bytes measured."""
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(0, SMALL["vocab"], (2, 8), generator=g)
    y = torch.randint(0, SMALL["vocab"], (2, 8), generator=g)
    out = {
        s: step_and_measure(s, model, x, y, lm_loss, torch.optim.AdamW, lr=1e-3)
        for s in ("ddp", "zero2")
    }
    fsdp = copy.deepcopy(model)  # minidp's policy is FSDP2's, bit for bit (lesson 22)
    policy = minidp.MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    for layer in fsdp.layers:
        minidp.fully_shard(layer, mp_policy=policy)
    minidp.fully_shard(fsdp, mp_policy=policy)
    opt = torch.optim.AdamW(fsdp.parameters(), lr=1e-3)
    train_step(fsdp, opt, x, y, lm_loss)
    out["fsdp2-bf16"] = measure(fsdp, opt)
    return out


# %% [markdown]
# ## 1. How many parameters?
# The formula from the architecture, checked on a scaled-down torch model of the same
# shape (``sum(p.numel())``), then applied to the published configuration:

# %%
if __name__ == "__main__":
    kit.title("Lesson 23: planning a real model — Qwen2.5-14B on two A100s")
    model = small_model()
    counted = sum(p.numel() for p in model.parameters())  # global (nothing is sharded here)
    formula_small = qwen2_param_count(**SMALL)
    psi = qwen2_param_count(**QWEN_14B)
    print(f"small Qwen2-shaped model: formula {formula_small}, torch counts {counted}")
    print(
        f"Qwen2.5-14B: {psi / 1e9:.2f} B parameters (model card: 14.7 B; "
        f"{(psi - 2 * QWEN_14B['vocab'] * QWEN_14B['hidden']) / 1e9:.2f} B without embeddings, card: 13.1 B)"
    )

# %% [markdown]
# ## 2. The post's case: every parameter frozen
# A frozen model needs no gradients and no optimizer state: only the weights. DP and DDP
# put a full copy on each GPU (and DP's main GPU also gathers every output); FSDP would
# split it. Two A100s come with 40 or 80 GiB:

# %%
if __name__ == "__main__":
    for precision in ("fp32", "bf16"):
        r = plan.plan(psi, 2, 80, precision=precision, trainable=0)
        print(
            f"frozen, {precision}: DP/DDP {r[0].total / GIB:.1f} GiB on each GPU, "
            f"FSDP {r[3].total / GIB:.1f} GiB"
        )
    frozen32 = plan.plan(psi, 2, 40, precision="fp32", trainable=0)
    frozen16 = plan.plan(psi, 2, 40, precision="bf16", trainable=0)
    print(
        f"fp32 weights: {frozen32[0].total / GIB:.1f} GiB per GPU replicated — over a 40 GiB "
        f"A100 before a single activation; bf16: {frozen16[0].total / GIB:.1f} GiB. DP vs DDP "
        "does not change the replica; halving the bytes (bf16) or splitting the weights (FSDP) does."
    )

# %% [markdown]
# ## 3. Fully fine-tuning it with AdamW
# Two mixed-precision *layouts* hold the same 16 bytes per parameter, split differently:
#
# * the ZeRO paper's (Megatron, DeepSpeed): bf16 weights and gradients, an fp32 master
#   copy and fp32 moments, 2 + 2 + 12 — what the planner's `bf16-mixed` counts;
# * FSDP2's `MixedPrecisionPolicy(param_dtype=bf16)` (lesson 22): the sharded weights *are*
#   the fp32 master copy, their gradients are fp32, moments fp32: 4 + 4 + 8 — `fsdp2-bf16` —
#   plus, for a moment, bf16 copies of the units being gathered (one decoder layer here,
#   two while the next is prefetched).
#
# DDP and ZeRO-1 also keep torch DDP's flat gradient buckets (lesson 18), a second gradient
# copy unless `gradient_as_bucket_view=True` (`--ddp-buckets` counts them). On two 80 GiB
# A100s:

# %%
if __name__ == "__main__":
    rows = plan.plan(psi, 2, 80, buckets=True)
    print(plan.format_plan(rows, psi, 2, "Qwen2.5-14B, AdamW", "2+2+12 bytes/param", "bf16-mixed"))
    fsdp2 = plan.plan(psi, 2, 80, precision="fsdp2-bf16", buckets=True)
    print(plan.format_plan(fsdp2, psi, 2, "Qwen2.5-14B, AdamW", "4+4+8 bytes/param", "fsdp2-bf16"))
    psi_layer = qwen2_param_count(**{**QWEN_14B, "layers": 1}) - qwen2_param_count(
        **{**QWEN_14B, "layers": 0}
    )
    print(
        f"FSDP2 also gathers bf16 units: one decoder layer = {psi_layer / 1e6:.0f} M parameters = "
        f"{2 * psi_layer / GIB:.2f} GiB, two with prefetch; the root (embeddings, head) "
        f"{2 * 2 * QWEN_14B['vocab'] * QWEN_14B['hidden'] / GIB:.2f} GiB."
    )
    need = {}
    for stage in plan.STAGES:
        n = 1
        while not plan.plan(psi, n, 80, buckets=True)[plan.STAGES.index(stage)].fits and n <= 1024:
            n += 1
        need[stage] = n
    print(
        "GPUs of 80 GiB needed for the model states alone:",
        ", ".join(f"{plan.STAGE_NAMES[s]}: {'never' if n > 1024 else n}" for s, n in need.items()),
    )

# %% [markdown]
# ## 4. Are the planner's bytes what real tensors take?
# The small Qwen2-shaped model trained one AdamW step by torch alone (fp32: 4 + 4 + 8);
# then on 2 ranks under minidp's DDP (with its buckets), ZeRO-2, and FSDP with the bf16
# policy (FSDP2's layout), measured from the tensors:

# %%
if __name__ == "__main__":
    alone = small_model()
    opt = torch.optim.AdamW(alone.parameters(), lr=1e-3)
    tokens = torch.randint(0, SMALL["vocab"], (2, 8))
    lm_loss(alone(tokens), tokens).backward()
    opt.step()
    measured = measure(alone, opt)
    planned = plan.plan(counted, 1, 80, precision="fp32")[0]
    n_tensors = len(list(alone.parameters()))
    print(
        f"one torch process: measured {measured.total} B, planner {planned.total:.0f} B "
        f"(+ {4 * n_tensors} B of AdamW step counters)"
    )
    ranks = run_threads(stages_on_rank, 2, model)
    z2 = [r["zero2"] for r in ranks]
    planned2 = plan.plan(counted, 2, 80, precision="fp32")[2]
    print(
        f"ZeRO-2, 2 ranks: measured {[u.total for u in z2]} B per rank, planner {planned2.total:.0f} B"
    )
    ddp = [r["ddp"] for r in ranks]
    planned_ddp = plan.plan(counted, 2, 80, precision="fp32", buckets=True)[0]
    print(f"DDP, 2 ranks: measured {[u.total for u in ddp]} B per rank, planner with buckets "
          f"{planned_ddp.total:.0f} B (+ {4 * n_tensors} B of step counters)")  # fmt: skip
    f2 = [r["fsdp2-bf16"] for r in ranks]
    planned_f2 = plan.plan(counted, 2, 80, precision="fsdp2-bf16")[3]
    for name, u, pl in (
        ("mixed FSDP, measured", f2[0], None),
        ("planner fsdp2-bf16", None, planned_f2),
    ):
        w, g, o = (u.params, u.grads, u.optimizer) if u else (pl.weights, pl.grads, pl.optimizer)
        print(f"{name:>24}: weights {w / counted:.2f}, grads {g / counted:.2f}, "
              f"optimizer {o / counted:.2f} B per parameter")  # fmt: skip

# %% [markdown]
# ## Checks

# %%
if __name__ == "__main__":
    kit.check_true(
        "parameter formula == torch's count on the small model",
        formula_small == counted,
        f"{counted}",
    )
    kit.check_true(
        "Qwen2.5-14B: 14.7 B parameters (model card)", abs(psi / 14.7e9 - 1) < 0.01, f"{psi}"
    )
    kit.check_true("frozen fp32 replica does not fit a 40 GiB A100", not frozen32[0].fits)
    kit.check_true(
        "DDP rank, measured: the planner's DDP row with buckets + step counters",
        all(u.total == planned_ddp.total + 4 * n_tensors for u in ddp),
        f"{[u.total for u in ddp]} vs {planned_ddp.total:.0f}",
    )
    kit.check_true("even FSDP on two 80 GiB GPUs does not fit", not rows[3].fits)
    kit.check_true(
        "one torch AdamW process: measured bytes == planner + step counters",
        measured.total == planned.total + 4 * n_tensors,
        f"{measured.total} vs {planned.total:.0f}",
    )
    kit.check_true(
        "ZeRO-2 per rank within 2% of the planner (padding, counters)",
        all(abs(u.total - planned2.total) <= 0.02 * planned2.total for u in z2),
        f"{[u.total for u in z2]} vs {planned2.total:.0f}",
    )
    # FSDP under the bf16 policy: the planner's fsdp2-bf16 split, not the paper's 2+2+12
    kit.check_true(
        "FSDP + bf16 policy, measured: the planner's fsdp2-bf16 weights/grads/optimizer (2%)",
        all(
            abs(got - want) <= 0.02 * want
            for u in f2
            for got, want in zip(
                (u.params, u.grads, u.optimizer),
                (planned_f2.weights, planned_f2.grads, planned_f2.optimizer),
            )
        ),
        f"{f2[0]} vs {planned_f2}",
    )
    kit.done()
