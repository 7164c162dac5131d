# %% [markdown]
# # Lesson 35 — fp16 needs loss scaling, bf16 does not; and sharded gradients
#
# Run: `python lessons/35_fp16_loss_scaling.py`
#
# Both 16-bit formats halve the bytes (lesson 22). They spend their 16 bits differently:
# fp16 has 10 mantissa bits but 5 exponent bits, so values below ~6e-8 become **zero** and
# above 65504 **inf**; bf16 keeps fp32's 8 exponent bits (same range) with 7 mantissa bits.
# Gradients are often tiny, so in fp16 many underflow to zero and the step silently
# ignores them. **Loss scaling** multiplies the loss by S (2¹⁶ by default) before backward —
# every gradient is S times larger, out of the underflow zone — and divides the gradients
# by S (in fp32) before the step. Too large an S overflows: then the step is skipped and S
# halved; after `growth_interval` clean steps S doubles again. That is
# `torch.amp.GradScaler`.
#
# Sharded gradients add a trap: an overflow may land in one rank's shard only. If that rank
# skips the step and the others take it, the model is half-updated. `ShardedGradScaler`
# all-reduces the "found inf" flag so every rank decides the same.

# %%
import warnings

import kit
import torch
import torch.nn.functional as F
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

import minidp

WORLD = 2
GROWTH_INTERVAL, STEPS = 3, 8
FP16, BF16 = torch.float16, torch.bfloat16
# GradScaler's found-inf flag is a 1-element tensor; DTensor warns when it replicates it
warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1")

# %% [markdown]
# ## 1. The ranges, measured
# `torch.finfo` gives each format's limits; casting a few gradient-sized values shows them.

# %%
if __name__ == "__main__":
    kit.title("Lesson 35: fp16 with loss scaling vs bf16")
    for dt in (torch.float32, BF16, FP16):
        fi = torch.finfo(dt)
        print(f"  {str(dt):<15} max {fi.max:.3g}, smallest normal {fi.tiny:.3g}, "
              f"smallest subnormal {fi.smallest_normal * fi.eps:.3g}, eps {fi.eps:.3g}")  # fmt: skip
    g = torch.tensor([1e-8, 3e-5, 7e4])  # a tiny gradient, a small one, a large activation
    for dt in (BF16, FP16):
        print(f"  {g.tolist()} in {dt}: {g.to(dt).float().tolist()}")
    scaled = (g[:1] * 2**16).to(FP16).float() / 2**16
    print(f"  1e-8 scaled by 2^16 in fp16, unscaled in fp32: {scaled.item():.4g}")
    kit.check_true("fp16 turns 1e-8 into 0, bf16 keeps it",
                   g.to(FP16)[0] == 0 and g.to(BF16)[0] != 0)  # fmt: skip
    kit.check_true("fp16 turns 7e4 into inf, bf16 does not",
                   torch.isinf(g.to(FP16)[2]) and torch.isfinite(g.to(BF16)[2]))  # fmt: skip
    kit.check_true(
        "scaled by 2^16, 1e-8 survives fp16 (within 1%)", abs(scaled.item() / 1e-8 - 1) < 0.01
    )

# %% [markdown]
# ## 2. Underflow in a real backward
# The baseline MLP under `torch.autocast` (fp16 or bf16 matmuls, fp32 weights), one
# backward of a loss weighted by 1e-4 (an auxiliary loss, or a big batch's mean: small
# gradients). Against the fp32 gradients: how many elements came out zero where fp32's are
# not, and the relative error of the rest.


# %%
def grads_under(dtype, scale: float) -> list[torch.Tensor]:
    model = kit.make_model(width=64)
    x, y = kit.make_data(256)
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        loss = 1e-4 * F.cross_entropy(model(x), y)
    (loss * scale).backward()
    return [p.grad / scale for p in model.parameters()]  # unscaled in fp32


if __name__ == "__main__":
    ref = torch.cat([g.flatten() for g in grads_under(torch.float32, 1.0)])
    lost = {}
    for name, dtype, scale in (("bf16", BF16, 1.0), ("fp16", FP16, 1.0),
                               ("fp16, scaled 2^16", FP16, 2.0**16)):  # fmt: skip
        got = torch.cat([g.flatten() for g in grads_under(dtype, scale)])
        lost[name] = ((got == 0) & (ref != 0)).sum().item()
        keep = got != 0
        err = ((got[keep] - ref[keep]).abs() / ref[keep].abs()).median().item()
        print(f"  {name:<18} {lost[name]:>5} of {ref.numel()} gradients lost to zero, "
              f"median relative error of the rest {err:.2e}")  # fmt: skip
    kit.check_true("fp16 without scaling loses gradients to underflow", lost["fp16"] > 0,
                   f"{lost['fp16']} zeros")  # fmt: skip
    kit.check_true("bf16 loses none (fp32's exponent range)", lost["bf16"] == 0)
    kit.check_true("loss scaling brings fp16's lost gradients back",
                   lost["fp16, scaled 2^16"] < lost["fp16"] / 10,
                   f"{lost['fp16, scaled 2^16']} zeros")  # fmt: skip

# %% [markdown]
# ## 3. GradScaler's rules, written out and checked
# Skip the step when any gradient is inf/nan and multiply S by `backoff_factor` (0.5);
# otherwise unscale (multiply by the fp32 reciprocal of S), step, and after
# `growth_interval` clean steps in a row multiply S by `growth_factor` (2). Started at
# S = 2²², fp16 overflows until S has halved enough; then S grows every 3 clean steps
# until it overflows again. The textbook version below against `torch.amp.GradScaler`.


# %%
class TextbookScaler:
    def __init__(self, scale: float, interval: int) -> None:
        self.scale, self.interval, self.clean = scale, interval, 0

    def step(self, opt, params) -> bool:
        grads = [p.grad for p in params if p.grad is not None]
        found_inf = not all(torch.isfinite(g).all() for g in grads)
        inv = torch.tensor(self.scale, dtype=torch.float64).reciprocal().float()  # like torch
        for g in grads:
            g.mul_(inv)
        if not found_inf:
            opt.step()
        self.clean = 0 if found_inf else self.clean + 1
        if found_inf:
            self.scale *= 0.5
        elif self.clean == self.interval:
            self.scale, self.clean = self.scale * 2.0, 0
        return not found_inf


def train_scaled(scaler_kind: str) -> tuple[list[float], list[torch.Tensor]]:
    model = kit.make_model(width=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = kit.make_data(64 * STEPS)
    if scaler_kind == "torch":
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**22, growth_interval=GROWTH_INTERVAL)
    else:
        scaler = TextbookScaler(2.0**22, GROWTH_INTERVAL)
    scales = []
    for xb, yb in kit.batches(x, y, 64):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=FP16):
            loss = F.cross_entropy(model(xb), yb)
        if scaler_kind == "torch":
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        else:
            (loss.float() * scaler.scale).backward()
            scaler.step(opt, list(model.parameters()))
            scales.append(scaler.scale)
    return scales, [p.detach() for p in model.parameters()]


if __name__ == "__main__":
    theirs, ours = train_scaled("torch"), train_scaled("textbook")
    print(
        "  S after each step (torch):   ",
        [f"2^{torch.tensor(s).log2().item():g}" for s in theirs[0]],
    )
    print(
        "  S after each step (textbook):", [f"2^{torch.tensor(s).log2().item():g}" for s in ours[0]]
    )
    kit.check_true("the textbook scale sequence = torch GradScaler's", ours[0] == theirs[0])
    kit.check("the textbook scaler's weights = torch GradScaler's", ours[1], theirs[1])
    kit.check_true(
        "overflows skipped and halved S, then S grew after 3 clean steps",
        theirs[0][0] < 2**22 and any(b == 2 * a for a, b in zip(theirs[0], theirs[0][1:])),
    )

# %% [markdown]
# ## 4. Sharded gradients: one rank's overflow must stop every rank
# 2 ranks, one backward, then an inf planted in rank 1's shard of the first weight's
# gradient — what an overflow in rows that rank 1 owns looks like after the
# reduce-scatter. Rank 0's shard is clean. Four combinations:
#
# * `ShardedGradScaler` all-reduces the found-inf flag
#   (`torch/distributed/fsdp/sharded_grad_scaler.py`, `dist.all_reduce(found_inf...)`);
# * plain `torch.amp.GradScaler` checks each rank's own gradients — but FSDP2's and
#   minidp's gradients are DTensors, and DTensor itself all-reduces the flag of
#   `_amp_foreach_non_finite_check_and_unscale_` (`found_inf_reduce_handler` in
#   `torch/distributed/tensor/_dispatch.py`), so plain GradScaler is safe on both. (On
#   plain-tensor shards it would not be: rank 0 would step while rank 1 skipped.)


# %%
def one_step(rank: int, world: int, lib: str, kind: str) -> dict:
    model = kit.make_model(width=16)
    if lib == "minidp":
        minidp.fully_shard(model[0])
        minidp.fully_shard(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = (ShardedGradScaler if kind == "ShardedGradScaler" else torch.amp.GradScaler)(
        "cpu", init_scale=2.0**10
    )
    x, y = kit.make_data(8, seed=rank)
    scaler.scale(F.cross_entropy(model(x), y)).backward()
    grad = model[0].weight.grad
    if rank == 1:  # the planted overflow, in rank 1's rows only
        (grad.to_local() if hasattr(grad, "to_local") else grad)[0, 0] = float("inf")
    before = model[0].weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    stepped = not torch.equal(before, model[0].weight.detach())
    return {"stepped": stepped, "scale": scaler.get_scale()}


def fp16_training(rank: int, world: int) -> dict:
    out = {}
    for lib in ("minidp",) if kit.why_no_fsdp2() else ("minidp", "fsdp2"):
        model = kit.make_model(width=32)
        if lib == "minidp":
            mp = minidp.MixedPrecisionPolicy(param_dtype=FP16)
            minidp.fully_shard(model[0], mp_policy=mp)
            minidp.fully_shard(model, mp_policy=mp)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mesh, mp = init_device_mesh("cpu", (world,)), MixedPrecisionPolicy(param_dtype=FP16)
            fully_shard(model[0], mesh=mesh, mp_policy=mp)
            fully_shard(model, mesh=mesh, mp_policy=mp)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        scaler = ShardedGradScaler("cpu", init_scale=2.0**20, growth_interval=GROWTH_INTERVAL)
        x, y = kit.make_data(32 * STEPS, seed=rank)
        scales = []
        for xb, yb in kit.batches(x, y, 32):
            opt.zero_grad()
            scaler.scale(F.cross_entropy(model(xb).float(), yb)).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        if lib == "minidp":
            weights = list(minidp.fsdp.full_state_dict(model).values())
        else:
            weights = [p.full_tensor().detach() for p in model.parameters()]
        out[lib] = {"scales": scales, "weights": weights}
    return out


def scaler_lesson(rank: int, world: int) -> dict:
    """Sections 4 and 5 in one pair of rank processes (starting them is the slow part)."""
    libs = ("minidp",) if kit.why_no_fsdp2() else ("minidp", "fsdp2")
    scalers = {(lib, kind): one_step(rank, world, lib, kind)
               for lib in libs for kind in ("GradScaler", "ShardedGradScaler")}  # fmt: skip
    return {"scalers": scalers, "fp16": fp16_training(rank, world)}


if __name__ == "__main__":
    both = kit.spawn(scaler_lesson, WORLD)
    res = [b["scalers"] for b in both]
    for key in res[0]:
        print(f"  {key[0]:<6} + {key[1]:<17}: " + ", ".join(
            f"rank {r} {'stepped' if res[r][key]['stepped'] else 'skipped'}, S={res[r][key]['scale']:g}"
            for r in range(WORLD)))  # fmt: skip
    for key in res[0]:  # (DTensor gradients: one rank's overflow reaches every rank)
        kit.check_true(
            f"{key[0]} + {key[1]}: every rank skips, S halves on every rank",
            all(not r[key]["stepped"] and r[key]["scale"] == 2.0**9 for r in res),
        )
    if kit.why_no_fsdp2():
        print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")

# %% [markdown]
# ## 5. Training in fp16 with ShardedGradScaler: minidp = FSDP2
# `MixedPrecisionPolicy(param_dtype=float16)`: fp32 shards, fp16 gathered weights and
# gradients, the scaler's skips and growth on every rank alike. Both libraries, a few
# steps, bit for bit (`fp16_training`, run by section 4's rank processes).


# %%
if __name__ == "__main__":
    res = [b["fp16"] for b in both]
    print(
        "  S per step (minidp, rank 0):",
        [f"2^{torch.tensor(s).log2().item():g}" for s in res[0]["minidp"]["scales"]],
    )
    if "fsdp2" in res[0]:
        for rank, r in enumerate(res):
            kit.check_true(f"rank {rank}: the scale sequence = FSDP2's",
                           r["minidp"]["scales"] == r["fsdp2"]["scales"])  # fmt: skip
            kit.check(f"rank {rank}: fp16 + ShardedGradScaler weights = FSDP2's",
                      r["minidp"]["weights"], r["fsdp2"]["weights"])  # fmt: skip
    else:
        print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")
    kit.done()

# %% [markdown]
# **Which one?** bf16 where the hardware has it (A100, H100 and later; recent CPUs): no
# scaler, no skipped steps, the same exponent range as fp32; its 3 significant digits are
# why the master weights stay fp32 (lesson 22). fp16 (V100, T4, older GPUs): always with a
# scaler — and with sharded gradients one whose decision is global: `ShardedGradScaler`,
# or FSDP2's DTensor gradients with either scaler.
