# %% [markdown]
# # Lesson 35 — fp16 needs loss scaling, bf16 does not; and sharded gradients
#
# Run: `python lessons/35_fp16_loss_scaling.py`
#
# Both 16-bit formats halve the bytes (lesson 22). They spend their 16 bits differently:
# fp16 has 10 mantissa bits but 5 exponent bits. Its smallest step is 2⁻²⁴ ≈ 6e-8 (the
# smallest *subnormal*), so values below half of it, 2⁻²⁵ ≈ 3e-8, round to **zero**; below
# 2⁻¹⁴ ≈ 6e-5 values are subnormal — multiples of 2⁻²⁴, with fewer significant bits the
# smaller they are. At the top, fp16's largest value is 65504 and its step there is 32:
# rounding to nearest sends values from 65520 (half a step above 65504) up to **inf**, and
# those below 65520 to 65504 at most. bf16 keeps fp32's 8 exponent bits (same range) with
# 7 mantissa bits. Gradients are often tiny, so in fp16 many underflow to zero and the step
# silently ignores them, and those that survive are coarse. **Loss scaling** multiplies the
# loss by S (2¹⁶ by default) before backward —
# every gradient is S times larger, out of the underflow zone — and divides the gradients
# by S (in fp32) before the step. Too large an S overflows: then the step is skipped and S
# halved; after `growth_interval` clean steps S doubles again. That is
# `torch.amp.GradScaler`.
#
# Sharded gradients add two traps: an overflow may land in one rank's shard only (if that
# rank skips the step and the others take it, the model is half-updated: `ShardedGradScaler`
# all-reduces the "found inf" flag so every rank decides the same), and the reduction itself
# sums the ranks' scaled fp16 gradients, which can overflow where none of them did
# (`MixedPrecisionPolicy(reduce_dtype=torch.float32)` reduces in fp32).

# %%
import warnings

import kit
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

import minidp
from minidp.fsdp.shard import divide_factors

WORLD = 2
GROWTH_INTERVAL, STEPS, MAX_NORM = 3, 8, 0.5
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
    edge = torch.tensor([2.9e-8, 3.0e-8]).to(FP16).float()  # 2^-25 = 2.98e-8 between them
    print(f"  2.9e-8 and 3.0e-8 in fp16: {edge.tolist()} (2^-24 = {2.0**-24:.4g})")
    kit.check_true("fp16's zero edge is 2^-25 ≈ 3e-8, half the smallest subnormal: 2.9e-8 → 0, "
                   "3.0e-8 → 2^-24", edge.tolist() == [0.0, 2.0**-24])  # fmt: skip
    top = torch.tensor([65504.0, 65519.0, 65519.99, 65520.0]).to(FP16).float()
    print(f"  65504, 65519, 65519.99 and 65520 in fp16: {top.tolist()}")
    kit.check_true("fp16's inf edge is 65520, half a step (16) above its largest value 65504: "
                   "65519.99 → 65504, 65520 → inf",
                   top[:3].tolist() == [65504.0] * 3 and torch.isinf(top[3]))  # fmt: skip

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
    lost, errs = {}, {}
    for name, dtype, scale in (("bf16", BF16, 1.0), ("fp16", FP16, 1.0),
                               ("fp16, scaled 2^16", FP16, 2.0**16)):  # fmt: skip
        got = torch.cat([g.flatten() for g in grads_under(dtype, scale)])
        lost[name] = ((got == 0) & (ref != 0)).sum().item()
        keep = got != 0
        errs[name] = ((got[keep] - ref[keep]).abs() / ref[keep].abs()).median().item()
        print(f"  {name:<18} {lost[name]:>5} of {ref.numel()} gradients lost to zero, "
              f"median relative error of the rest {errs[name]:.2e}")  # fmt: skip
    kit.check_true("fp16 without scaling loses gradients to underflow", lost["fp16"] > 0,
                   f"{lost['fp16']} zeros")  # fmt: skip
    kit.check_true("bf16 loses none (fp32's exponent range)", lost["bf16"] == 0)
    kit.check_true("loss scaling brings fp16's lost gradients back",
                   lost["fp16, scaled 2^16"] < lost["fp16"] / 10,
                   f"{lost['fp16, scaled 2^16']} zeros")  # fmt: skip

# %% [markdown]
# Why the fp16 gradients that do survive are off by tens of percent: they are subnormal. A
# subnormal fp16 value is k · 2⁻²⁴ for an integer k < 1024, so it carries only ⌊log₂ k⌋ + 1
# significant bits (a normal fp16 number carries 11), and rounding it errs by up to half a
# step: 1/(2k). Backward computes each gradient from the one before, so the coarseness
# compounds layer by layer: the gradient entering backward at the logits (cast to fp16 by
# autocast) is already ~2 · 2⁻²⁴; the gradient flowing into each earlier layer is smaller
# still, mostly 0 or 2⁻²⁴; each weight gradient is computed in fp16 from the one flowing into
# its layer. Each step of backward, as fp16 holds them (bits counted from the values):


# %%
def significant_bits(v: torch.Tensor) -> torch.Tensor:
    """The significant bits fp16 keeps for each (fp16-representable) value: 11 for a normal
    number; for a subnormal k · 2^-24, floor(log2 k) + 1."""
    k = v.abs().double() / 2.0**-24
    return torch.where(v.abs() >= 2.0**-14, 11.0, k.log2().floor() + 1)


def keep_output_grad(outputs: list):
    def hook(module, inputs, out):  # returns None: the output itself is unchanged
        out.retain_grad()
        outputs.append(out)

    return hook


if __name__ == "__main__":
    chain = {}
    for dtype, scale in ((torch.float32, 1.0), (FP16, 1.0), (FP16, 2.0**16)):
        model = kit.make_model(width=64)
        x, y = kit.make_data(256)
        outputs = []  # each Linear's output: its gradient is what flows back into the layer
        for m in model[::2]:
            m.register_forward_hook(keep_output_grad(outputs))
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            loss = 1e-4 * F.cross_entropy(model(x), y)
        (loss * scale).backward()  # every .grad holds fp16 values here (scaled)
        grads = []
        for k, (out, layer) in reversed(list(enumerate(zip(outputs, model[::2])))):
            grads += [(f"into Linear {2 * k}'s output", out.grad.float()),
                      (f"Linear {2 * k}'s weight", layer.weight.grad)]  # fmt: skip
        chain[dtype, scale] = grads
    print(f"  {'gradient (fp16, unscaled)':<30}{'median |g|/2^-24':>17}{'bits':>6}{'lost':>6}"
          f"{'median error':>14}   scaled 2^16: bits, error")  # fmt: skip
    bits = {}
    for (name, want), (_, raw), (_, big) in zip(*(chain[k] for k in chain)):
        alive, alive_big = raw != 0, big != 0
        err = ((raw - want).abs()[alive] / want.abs()[alive]).median().item()
        err_big = ((big / 2.0**16 - want).abs()[alive_big] / want.abs()[alive_big]).median()
        bits[name] = (significant_bits(raw[alive]).median().item(),
                      significant_bits(big[alive_big]).median().item())  # fmt: skip
        print(f"  {name:<30}{(raw[alive].abs() / 2.0**-24).median():>17.1f}{bits[name][0]:>6.0f}"
              f"{((raw == 0) & (want != 0)).float().mean():>6.0%}{err:>14.1%}   "
              f"{bits[name][1]:.0f}, {err_big:.1e}")  # fmt: skip
    flowing = {n: b for n, b in bits.items() if n.startswith("into")}
    kit.check_true(
        "unscaled, the gradients flowing back between layers are subnormal: at most 2 "
        "significant bits (median) where fp16 has 11; scaled by 2^16, all 11",
        all(b <= 2 and big == 11 for b, big in flowing.values()),
        str(flowing),
    )
    kit.check_true("... so the survivors' median error is tens of percent, not fp16's 0.05%",
                   errs["fp16"] > 0.1 > 1e-3 > errs["fp16, scaled 2^16"])  # fmt: skip

# %% [markdown]
# ## 3. GradScaler's rules, written out and checked — with clipping
# Skip the step when any gradient is inf/nan and multiply S by `backoff_factor` (0.5);
# otherwise unscale (multiply by the fp32 reciprocal of S), step, and after
# `growth_interval` clean steps in a row multiply S by `growth_factor` (2). Started at
# S = 2²², fp16 overflows until S has halved enough; then S grows every 3 clean steps
# until it overflows again. The textbook version below against `torch.amp.GradScaler`.
#
# Clipping goes between backward and the step, and it must see the *unscaled* gradients:
# `scaler.unscale_(opt)` first, then `clip_grad_norm_`, then `scaler.step(opt)` (which does
# not unscale twice). Clip before unscaling and `max_norm` applies to gradients S times too
# large: the step then uses `max_norm / S` — almost nothing.


# %%
class TextbookScaler:
    def __init__(self, scale: float, interval: int) -> None:
        self.scale, self.interval, self.clean, self.found_inf = scale, interval, 0, False

    def unscale_(self, params) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        self.found_inf = not all(torch.isfinite(g).all() for g in grads)
        inv = torch.tensor(self.scale, dtype=torch.float64).reciprocal().float()  # like torch
        for g in grads:
            g.mul_(inv)

    def step(self, opt) -> bool:
        if not self.found_inf:
            opt.step()
        self.clean = 0 if self.found_inf else self.clean + 1
        if self.found_inf:
            self.scale *= 0.5
        elif self.clean == self.interval:
            self.scale, self.clean = self.scale * 2.0, 0
        return not self.found_inf


def train_scaled(scaler_kind: str) -> tuple[list[float], list[torch.Tensor], list[float]]:
    model = kit.make_model(width=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = kit.make_data(64 * STEPS)
    if scaler_kind == "torch":
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**22, growth_interval=GROWTH_INTERVAL)
    else:
        scaler = TextbookScaler(2.0**22, GROWTH_INTERVAL)
    scales, norms = [], []
    for xb, yb in kit.batches(x, y, 64):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=FP16):
            loss = F.cross_entropy(model(xb), yb)
        if scaler_kind == "torch":
            scaler.scale(loss).backward()
            scaler.unscale_(opt)  # before clipping: clip the true gradients
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM).item())
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        else:
            (loss.float() * scaler.scale).backward()
            scaler.unscale_(model.parameters())
            norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM).item())
            scaler.step(opt)
            scales.append(scaler.scale)
    return scales, [p.detach() for p in model.parameters()], norms


def clipped_norm(unscale_first: bool) -> float:
    """The gradient norm the optimizer would step with, after clipping in either order."""
    model = kit.make_model(width=64)
    x, y = kit.make_data(64)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with torch.autocast("cpu", dtype=FP16):
        scaler.scale(F.cross_entropy(model(x), y) * 10).backward()  # x10: a norm to clip
    if unscale_first:
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
    if not unscale_first:
        scaler.unscale_(opt)  # what scaler.step(opt) would do now
    return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))


if __name__ == "__main__":
    theirs, ours = train_scaled("torch"), train_scaled("textbook")
    print(
        "  S after each step (torch):   ",
        [f"2^{torch.tensor(s).log2().item():g}" for s in theirs[0]],
    )
    print(
        "  S after each step (textbook):", [f"2^{torch.tensor(s).log2().item():g}" for s in ours[0]]
    )
    print(f"  gradient norms before clipping to {MAX_NORM} (torch):",
          [f"{n:.3g}" for n in theirs[2]])  # fmt: skip
    kit.check_true("the textbook scale sequence = torch GradScaler's", ours[0] == theirs[0])
    kit.check("the textbook scaler's weights = torch GradScaler's (unscale_, clip, step)",
              ours[1], theirs[1])  # fmt: skip
    kit.check_true(
        "overflows skipped and halved S, then S grew after 3 clean steps",
        theirs[0][0] < 2**22 and any(b == 2 * a for a, b in zip(theirs[0], theirs[0][1:])),
    )
    kit.check_true(f"clipping engaged: some clean step's norm exceeded {MAX_NORM}",
                   any(MAX_NORM < n < float("inf") for n in theirs[2]))  # fmt: skip
    right, wrong = clipped_norm(True), clipped_norm(False)
    print(f"  norm the step uses: unscale_ then clip {right:.4g}; clip then unscale "
          f"{wrong:.4g} (= max_norm / S = {MAX_NORM / 2**10:.4g})")  # fmt: skip
    kit.check_true(
        "clip after unscale_: max_norm; clip before it: max_norm / S",
        abs(right - MAX_NORM) < 1e-5 and abs(wrong - MAX_NORM / 2**10) < 1e-8,
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
def why_no_scaler() -> str:
    """Why a GradScaler cannot step DTensor gradients with this torch; "" where it can."""
    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 8):
        # measured on 2.4.1: a RecursionError in DTensor's sharding propagation; 2.13 and
        # 2.15 are checked by this lesson; the releases between were not tried
        return f"torch {torch.__version__}'s DTensor fails in GradScaler.unscale_ (run from 2.8)"
    return ""


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
        if lib == "minidp":  # fp16 compute, fp32 reduction (section 5)
            mp = minidp.MixedPrecisionPolicy(param_dtype=FP16, reduce_dtype=torch.float32)
            minidp.fully_shard(model[0], mp_policy=mp)
            minidp.fully_shard(model, mp_policy=mp)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mesh = init_device_mesh("cpu", (world,))
            mp = MixedPrecisionPolicy(param_dtype=FP16, reduce_dtype=torch.float32)
            fully_shard(model[0], mesh=mesh, mp_policy=mp)
            fully_shard(model, mesh=mesh, mp_policy=mp)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        scaler = ShardedGradScaler("cpu", init_scale=2.0**20, growth_interval=GROWTH_INTERVAL)
        x, y = kit.make_data(32 * STEPS, seed=rank)
        scales = []
        for xb, yb in kit.batches(x, y, 32):
            opt.zero_grad()
            scaler.scale(F.cross_entropy(model(xb).float(), yb)).backward()
            scaler.unscale_(opt)  # every rank's flag, all-reduced; then the true global norm
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
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
    skip = why_no_scaler()
    scalers = {} if skip else {(lib, kind): one_step(rank, world, lib, kind)
                               for lib in libs for kind in ("GradScaler", "ShardedGradScaler")}  # fmt: skip
    sums = {}  # section 5: the same finite gradient on both ranks, summed by the collective
    for dtype in (FP16, torch.float32):
        grad = torch.full((4,), 40000.0, dtype=dtype)  # a scaled gradient, finite in fp16
        dist.all_reduce(grad)
        sums[str(dtype)] = grad[0].item()
    return {"scalers": scalers, "sums": sums, "fp16": {} if skip else fp16_training(rank, world)}


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
    if why_no_scaler():
        print(f"  (the scalers skipped: {why_no_scaler()})")
    elif kit.why_no_fsdp2():
        print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")

# %% [markdown]
# ## 5. Training in fp16 with ShardedGradScaler: minidp = FSDP2
# Loss scaling pushes the gradients up towards fp16's largest value on purpose. The
# reduce-scatter then *adds* the ranks' gradients — in `param_dtype` unless told otherwise —
# and a sum can overflow where no rank's gradient did: two ranks' 40,000 make 80,000, past
# 65,504. The scaler sees the inf and skips the step, for a gradient that was fine. FSDP2
# (and minidp, `minidp.fsdp.shard.divide_factors`) divides fp16 gradients by about √W before
# the sum and by the rest after it, which covers 2 ranks, not W: the sum is still W/pre times
# a rank's gradient. `MixedPrecisionPolicy(param_dtype=float16, reduce_dtype=float32)` reduces
# in fp32 instead: no overflow, and the fp32 shards' gradients get fp32 sums (bf16 has fp32's
# range, so this is fp16's problem).
#
# Then the whole loop as it should be: fp32 shards, fp16 gathered weights, fp32 reduction,
# `scaler.scale(loss).backward()`, `scaler.unscale_(opt)`, `clip_grad_norm_` on the sharded
# gradients (the global norm, lesson 32), `scaler.step(opt)`, `scaler.update()` — the skips
# and growth on every rank alike. Both libraries, a few steps, bit for bit (`fp16_training`,
# run by section 4's rank processes).


# %%
if __name__ == "__main__":
    sums = both[0]["sums"]
    print(f"  all-reduce of 40,000 from each of 2 ranks: fp16 {sums[str(FP16)]}, fp32 "
          f"{sums[str(torch.float32)]:,.0f}")  # fmt: skip
    kit.check_true("two finite fp16 gradients sum to inf in an fp16 reduction; fp32 holds it",
                   sums[str(FP16)] == float("inf") and sums[str(torch.float32)] == 80000.0)  # fmt: skip
    largest = {w: 65504 * divide_factors(w, FP16)[0] / w
               for w in (2, 8, 64, 512)}  # fmt: skip
    print("  fp16 reduction with FSDP2's pre-division: the largest gradient per rank that "
          "cannot overflow, by world size: "
          + ", ".join(f"{w}: {g:,.0f}" for w, g in largest.items()))  # fmt: skip
    kit.check_true("pre-dividing by ~√W covers 2 ranks' sum, not 64's (65,504 x 8 / 64)",
                   largest[2] == 65504 and largest[64] == 8188)  # fmt: skip
    res = [b["fp16"] for b in both]
    if res[0]:
        print(
            "  S per step (minidp, rank 0):",
            [f"2^{torch.tensor(s).log2().item():g}" for s in res[0]["minidp"]["scales"]],
        )
    if why_no_scaler():
        print(f"  (fp16 training skipped: {why_no_scaler()})")
    elif "fsdp2" in res[0]:
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
# or FSDP2's DTensor gradients with either scaler; `reduce_dtype=torch.float32` so that the
# sum over ranks cannot overflow; and `scaler.unscale_(opt)` before any clipping.
