# %% [markdown]
# # Lesson 34 — when it does not fit: CPU offload, LoRA, 8-bit optimizer states
#
# Run: `python lessons/34_cpu_offload_and_fitting.py`
#
# Lesson 23 ended with Qwen2.5-14B's AdamW fine-tuning at 110 GiB per GPU even under FSDP
# on two 80 GiB GPUs. Three ways to make the model states smaller *on the GPU*:
#
# * **CPU offload** — keep the shards, their gradients and the optimizer state in host
#   memory; the GPU holds only the units being computed. ZeRO-Offload (Ren et al., 2021;
#   DeepSpeed) keeps the 16-bit weights on the GPU and moves gradients and optimizer state
#   (and the step) to the CPU; FSDP2's `CPUOffloadPolicy` moves parameters, gradients and
#   optimizer state (its docstring: "Sharded parameters are copied host-to-device before
#   all-gather ... the optimizer step runs on CPU with CPU optimizer states").
#   Cost: host↔device copies every step, and the optimizer step on the CPU.
# * **LoRA** — train a few low-rank adapters, freeze the rest: no gradients and no
#   optimizer state for the frozen weights (the planner's `trainable` fraction).
# * **8-bit optimizer states** — Adam's two moments quantised per block to int8 with one
#   fp32 scale per block: 2 × 1 byte instead of 2 × 4 per parameter.
#
# On this CPU-only machine "host" and "device" are the same memory: offload cannot save
# anything here, and the lesson says where it cannot run. It teaches from measured bytes.

# %%
import importlib.util
import math

import kit
import torch
import torch.nn.functional as F
from torch import nn

import minidp
from minidp.tools.planner import plan
from minidp.tools.planner.memory import measure, optimizer_tensors, storage_bytes
from minidp.tools.planner.units import units

WORLD, PSI = 2, 14.7e9  # Qwen2.5-14B's parameters (lesson 23)
DIM, LAYERS, RANK = kit.pick(64, 32), kit.pick(4, 2), 4  # RANK: LoRA's r


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(LAYERS):
        layers += [nn.Linear(DIM, DIM), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(DIM, 4))


def data(rank: int):
    g = torch.Generator().manual_seed(rank)
    return torch.randn(8, DIM, generator=g), torch.randint(0, 4, (8,), generator=g)


# %% [markdown]
# ## 1. FSDP2's `CPUOffloadPolicy` on this machine
# Two ranks, the same model, each hidden layer a unit and the root holding the output
# layer: FSDP2 without offload, with `CPUOffloadPolicy()` (its default `pin_memory=True`),
# with `CPUOffloadPolicy(pin_memory=False)`, and minidp's FSDP. Pinned (page-locked) host
# memory is what lets a GPU copy asynchronously; without an accelerator torch cannot pin (a
# CPU build says it has no accelerator; a CUDA build on a machine without a GPU says it
# found no NVIDIA driver).
#
# What crosses the host-device link per step, from FSDP2's own code
# (`FSDPParam.all_gather_inputs`, `foreach_reduce`): before every all-gather the rank's
# fp32 shard of the unit is copied to the device (`.to(device, non_blocking=True)`) and cast
# to `param_dtype` there; after every reduce-scatter the gradient shard is copied back.
# Without mixed precision (here) the all-gather inputs and the reduce-scatter outputs,
# counted at `dist.all_gather_single` / `dist.reduce_scatter_single` (what FSDP2 calls),
# are those copies, byte for byte — on a CPU, where the copies themselves are no-ops.


# %%
def shard_units(model: nn.Sequential, fully_shard, **kw) -> nn.Sequential:
    for layer in list(model)[:-1:2]:  # every hidden Linear a unit; the root keeps the head
        fully_shard(layer, **kw)
    return fully_shard(model, **kw)


def counted_step(model, opt, x, y) -> dict:
    """One training step; the bytes FSDP2 all-gathers in and reduce-scatters out, and which
    parameters are gathered (not DTensors) between forward and backward."""
    import torch.distributed as dist

    counts = {"all-gather in": 0, "reduce-scatter in": 0, "reduce-scatter out": 0}
    # (torch 2.11 and before: FSDP2 calls all_gather_into_tensor / reduce_scatter_tensor)
    new = hasattr(dist, "all_gather_single")
    ag_name = "all_gather_single" if new else "all_gather_into_tensor"
    rs_name = "reduce_scatter_single" if new else "reduce_scatter_tensor"
    ag, rs = getattr(dist, ag_name), getattr(dist, rs_name)

    def ag_counted(output_tensor, input_tensor, *args, **kwargs):
        counts["all-gather in"] += input_tensor.nbytes
        return ag(output_tensor, input_tensor, *args, **kwargs)

    def rs_counted(output, input, *args, **kwargs):
        counts["reduce-scatter in"] += input.nbytes  # the unit's gradients, one flat copy
        counts["reduce-scatter out"] += output.nbytes
        return rs(output, input, *args, **kwargs)

    setattr(dist, ag_name, ag_counted)
    setattr(dist, rs_name, rs_counted)
    try:
        loss = F.cross_entropy(model(x), y)
        gathered = [n for n, p in model.named_parameters() if type(p).__name__ != "DTensor"]
        loss.backward()
        opt.step()
    finally:
        setattr(dist, ag_name, ag)
        setattr(dist, rs_name, rs)
    return {**counts, "gathered after forward": gathered}


def offload_lesson(rank: int, world: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    out: dict = {}
    x, y = data(rank)
    for how in ("none", "offload, pinned", "offload, not pinned", "minidp"):
        model = make_model()
        try:
            if how == "minidp":
                shard_units(model, minidp.fully_shard)
            else:
                kw = (
                    {}
                    if how == "none"
                    else {"offload_policy": CPUOffloadPolicy(pin_memory=how == "offload, pinned")}
                )
                shard_units(model, fully_shard, mesh=init_device_mesh("cpu", (world,)), **kw)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if how == "offload, not pinned":  # the second step, counted
                out["copies"] = counted_step(model, opt, x, y)
            else:
                F.cross_entropy(model(x), y).backward()
                opt.step()
        except RuntimeError as exc:
            out[how] = f"{type(exc).__name__}: {exc}"
            continue
        used = measure(model, opt)  # this rank's own bytes: each DTensor's local rows
        held = [*model.parameters(), *(p.grad for p in model.parameters())]
        out[how] = {
            "bytes": [used.params, used.grads, used.optimizer],
            "devices": sorted({str(t.device) for t in held + optimizer_tensors(opt)}),
            "weights": minidp.fsdp.full_state_dict(model) if how == "minidp"
            else {n: p.full_tensor().detach() for n, p in model.named_parameters()},
        }  # fmt: skip
    return out


def padded_shard_bytes(module: nn.Module) -> int:
    """fp32 bytes of one rank's padded shard of ``module``'s own parameters (dim 0 cut in
    ``WORLD`` chunks of ``ceil(rows / WORLD)`` rows, FSDP2's rule)."""
    params = module.parameters(recurse=False)  # an unsharded module: global shapes
    return sum(4 * math.ceil(p.shape[0] / WORLD) * p[0].numel() for p in params)  # global


if __name__ == "__main__":
    kit.title("Lesson 34: CPU offload, LoRA, 8-bit optimizer states")
    if kit.why_no_fsdp2():
        print(f"  (FSDP2 sections skipped: {kit.why_no_fsdp2()})")
    else:
        res = kit.spawn(offload_lesson, WORLD)
        for how, r in res[0].items():
            if isinstance(r, str):
                print(f"  {how:<20}: {r}")
            elif how != "copies":
                print(
                    f"  {how:<20}: rank 0 holds {r['bytes']} B (params, grads, AdamW), on {r['devices']}"
                )
        pinned = res[0]["offload, pinned"]
        if torch.cuda.is_available():
            print("  (a GPU is present: pinning works; the CPU-only refusal is not shown)")
        else:
            # the words depend on the build: "accelerator" (CPU build), "NVIDIA driver" (CUDA)
            said = isinstance(pinned, str) and ("accelerator" in pinned or "driver" in pinned)
            kit.check_true("CPUOffloadPolicy() refuses without a GPU (it pins memory)",
                           said, str(pinned)[:120])  # fmt: skip
        for rank, r in enumerate(res):
            kit.check(f"rank {rank}: CPUOffloadPolicy(pin_memory=False) = no offload",
                      r["offload, not pinned"]["weights"], r["none"]["weights"])  # fmt: skip
            kit.check(f"rank {rank}: minidp FSDP = FSDP2 with offload", r["minidp"]["weights"],
                      r["offload, not pinned"]["weights"])  # fmt: skip
        numel = sum(p.numel() for p in make_model().parameters())  # global: unsharded
        row = plan.plan(numel, WORLD, 80, precision="fp32")[3]  # FSDP, fp32: 4 + 4 + 8
        got = sum(res[0]["offload, not pinned"]["bytes"])
        kit.check_true(
            "the offloaded states per rank = the planner's FSDP row (within 2%: padding, counters)",
            abs(got - row.total) <= 0.02 * row.total,
            f"{got:,} B measured vs {row.total:,.0f} B",
        )
        copies, model = res[0]["copies"], make_model()
        root, layers = model[-1], list(model)[:-1:2]
        root_names = [f"{len(model) - 1}.{n}" for n, _ in root.named_parameters()]
        print(f"  one offloaded step, rank 0: {copies['all-gather in']:,} B host→device (the "
              f"all-gathers' inputs), {copies['reduce-scatter out']:,} B device→host (the "
              f"gradient shards); gathered between forward and backward: "
              f"{copies['gathered after forward']}")  # fmt: skip
        kit.check_true(
            "FSDP2 keeps the root unit gathered from forward to backward, every other unit "
            "resharded",
            copies["gathered after forward"] == root_names,
        )
        h2d = 2 * sum(padded_shard_bytes(m) for m in layers) + padded_shard_bytes(root)
        d2h = sum(padded_shard_bytes(m) for m in model.modules())
        kit.check_true(
            "host→device per step: each unit's fp32 shard twice (forward, backward), the "
            "root's once; device→host: every gradient shard once",
            copies["all-gather in"] == h2d and copies["reduce-scatter out"] == d2h,
            f"{h2d:,} and {d2h:,} B from the shapes",
        )
        kit.check_true(
            "each reduce-scatter's input is a whole copy of its unit's gradients, on the device "
            f"beside them: {WORLD} x the shard",
            copies["reduce-scatter in"] == WORLD * d2h,
            f"{copies['reduce-scatter in']:,} B vs {WORLD} x {d2h:,}",
        )

# %% [markdown]
# Measured: offloaded or not, every tensor is on `cpu` here, and the bytes are the same —
# on a GPU machine the difference is *which memory* holds them. What it means for
# Qwen2.5-14B on 2 × 80 GiB (bf16 compute, fp32 shards and Adam moments: FSDP2's mixed
# precision, 16 bytes per parameter). The GPU holds what is gathered at the moment: the
# root unit — the embedding and the output head, 152,064 × 5,120 each, which FSDP2 keeps
# gathered from forward to backward (checked above) — and about two layers (the one
# computing and the one prefetched). Backward adds the unsharded gradients (the head's,
# from the start of backward to the root's reduce-scatter at its end, and the current
# layer's) and each unit's reduce-scatter input, a whole copy of its gradients in
# `reduce_dtype` (counted above). The planner adds them up
# (`minidp/tools/planner/units.py`); sharding the embedding and the head as units of their
# own frees them between uses.
#
# The link's speed and the GPU are *assumptions* here (no GPU on this machine): PCIe 4.0
# x16 moves at most 31.5 GB/s per direction (16 GT/s × 16 lanes × 128/130, the PCI-SIG
# specification; real copies reach less), PCIe 5.0 x16 twice that. The CPU's AdamW step is
# *measured* on this machine: a step over a few million fp32 parameters, per parameter,
# scaled to a rank's 7.35 B.

# %%
if __name__ == "__main__":
    import time

    rows = {r.stage: r for r in plan.plan(PSI, WORLD, 80)}
    gib = plan.GIB
    u = units("qwen2.5-14b", "fsdp2-bf16")  # bf16 compute, reduce_dtype=float32
    root, layer = u.root, u.layer  # embedding + head (not tied) + final norm; a decoder layer
    print(f"  FSDP, nothing offloaded: {rows['fsdp'].total / gib:.1f} GiB per GPU — does not fit")
    print(f"  FSDP2 + CPUOffloadPolicy, on the GPU: {u.describe()} (+ activations); host "
          f"RAM per rank {rows['fsdp'].total / gib:.1f} GiB")  # fmt: skip
    print(f"  ZeRO-Offload (ZeRO-2 + offload): GPU keeps the bf16 weights, {rows['zero2'].weights / gib:.1f} GiB; "
          f"host {(rows['zero2'].grads + rows['zero2'].optimizer) * WORLD / gib:.1f} GiB in all")  # fmt: skip
    h2d = 4 * (2 * (PSI - root) + root) / WORLD  # fp32 shards: two gathers a layer, root once
    d2h = 4 * PSI / WORLD  # the fp32 gradient shard, once
    for link, gbps in (("PCIe 4.0 x16", 31.5), ("PCIe 5.0 x16", 63.0)):
        print(f"  per step over {link} (assumed {gbps} GB/s each way): host→device "
              f"{h2d / 1e9:.0f} GB, {h2d / 1e9 / gbps:.1f} s; device→host {d2h / 1e9:.0f} GB, "
              f"{d2h / 1e9 / gbps:.1f} s")  # fmt: skip
    n = kit.pick(4_000_000, 1_000_000)
    p = torch.zeros(n, requires_grad=True)
    p.grad = torch.randn(n)
    opt = torch.optim.AdamW([p], lr=1e-3)
    opt.step()  # the first step creates the moments
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t0)
    ns = sorted(t / n * 1e9 for t in times)
    print(f"  CPU AdamW here ({torch.get_num_threads()} threads, {kit.machine()}): "
          f"{ns[2]:.1f} ns per parameter (median of 5, {ns[0]:.1f}-{ns[-1]:.1f}) → "
          f"{ns[2] * PSI / WORLD / 1e9:.0f} s per step for a rank's {PSI / WORLD / 1e9:.2f} B "
          "parameters; a server's cores and memory bandwidth divide it, and DeepSpeed ships an "
          "optimised CPU Adam for this step")  # fmt: skip
    # the same step on the GPU: AdamW reads weight, grad, m, v and writes weight, m, v
    # (28 B per fp32 parameter) through HBM: 3.35 TB/s on an H100 SXM (NVIDIA's datasheet)
    print(f"  (on the GPU, assumed H100 SXM at 3.35 TB/s: {28 * PSI / WORLD / 3.35e12:.2f} s)")

# %% [markdown]
# ## 2. LoRA: train a rank-r update, freeze the weight
# `W x + B A x` with `A` (r × in), `B` (out × r, zeros at the start: the model is unchanged
# until trained), every original weight frozen. The bytes after one AdamW step, measured
# from the tensors, against the planner with `trainable` = adapters / all parameters.


# %%
class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r: int) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.b = nn.Parameter(torch.zeros(base.out_features, r))

    def forward(self, x):
        return self.base(x) + (x @ self.a.T) @ self.b.T


if __name__ == "__main__":
    model = make_model()
    x, y = data(0)
    before = model(x)
    for i, m in enumerate(model):
        if isinstance(m, nn.Linear):
            model[i] = LoRALinear(m, RANK)
    kit.check("LoRA with B = 0 computes the frozen model's output", model(x), before.detach())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    used = measure(model, opt)
    total = sum(p.numel() for p in model.parameters())  # global (one process)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)  # global
    planned = plan.plan(total, 1, 80, precision="fp32", trainable=trainable / total)[0]
    counters = 4 * len(opt.state)  # AdamW's step counter, one fp32 scalar per trainable tensor
    print(f"  {trainable} of {total} parameters trainable ({trainable / total:.1%}); measured "
          f"grads {used.grads} B, AdamW {used.optimizer} B; planner {planned.grads:.0f} B, "
          f"{planned.optimizer:.0f} B (+ {counters} B of step counters)")  # fmt: skip
    kit.check_true(
        "LoRA: frozen weights get no gradient (measured = planner)", used.grads == planned.grads
    )
    kit.check_true("LoRA: optimizer state only for the adapters (measured = planner + counters)",
                   used.optimizer == planned.optimizer + counters)  # fmt: skip
    # Qwen2.5-14B, r = 16 on q, k, v, o, gate, up, down of all 48 layers (lesson 23's shapes)
    h, kv, f = 5120, 1024, 13824
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, f), (h, f), (f, h)]
    lora = 48 * sum(16 * (i + o) for i, o in shapes)
    r = plan.plan(PSI + lora, 1, 80, trainable=lora / (PSI + lora))[0]
    print(f"  Qwen2.5-14B + LoRA r=16: {lora / 1e6:.0f} M adapter parameters "
          f"({lora / PSI:.2%}); ONE GPU: {r.total / gib:.1f} GiB ({'fits' if r.fits else 'does not fit'} "
          "in 80 GiB before activations)")  # fmt: skip

# %% [markdown]
# ## 3. 8-bit optimizer states
# Blockwise quantisation: split a moment tensor into blocks of 256, store `round(127 · x /
# max|x|)` as int8 and the block's `max|x|` as fp32. Here applied to the AdamW moments of a
# few real steps, the bytes measured and the error read back, per block against that
# block's max — and against one scale for the whole tensor, to show what blocks buy.
# (Dettmers et al., 2022, "8-bit Optimizers via Block-wise Quantization", use a non-linear
# 8-bit code so that small values survive; the linear code below shows why: small
# second-moment entries round to 0, and Adam divides by their square root.)

# %%
BLOCK = 256


def quantize(t: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    flat = t.flatten()
    flat = F.pad(flat, (0, -len(flat) % block)).view(-1, block)  # (blocks, block)
    scale = flat.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)  # (blocks, 1) fp32
    return (flat / scale * 127).round().to(torch.int8), scale.flatten()


def dequantize(q: torch.Tensor, scale: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return (q.float() / 127 * scale[:, None]).flatten()[: like.numel()].view_as(like)


def worst_block_error(m: torch.Tensor, approx: torch.Tensor) -> float:
    """max over the BLOCK-sized blocks of m: |approx - m| / that block's max|m|."""
    err, ref = (F.pad(t.flatten(), (0, -m.numel() % BLOCK)).view(-1, BLOCK).abs()
                for t in (approx - m, m))  # fmt: skip
    block_max = ref.amax(dim=1)
    return (err.amax(dim=1)[block_max > 0] / block_max[block_max > 0]).max().item()


if __name__ == "__main__":
    print("  bitsandbytes:", "installed" if importlib.util.find_spec("bitsandbytes") else
          "not installed (the quantisation below is written out instead)")  # fmt: skip
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(3):
        F.cross_entropy(model(data(step)[0]), data(step)[1]).backward()
        opt.step()
        opt.zero_grad()
    moments = [s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]
    packed = [quantize(m) for m in moments]
    fp32_bytes = storage_bytes(moments)
    int8_bytes = sum(storage_bytes([q, s]) for q, s in packed)
    expected = sum(math.ceil(m.numel() / BLOCK) * (BLOCK + 4) for m in moments)
    first = [m for m in moments[0::2] if m.numel() > BLOCK]  # exp_avg, several blocks each
    err = max(worst_block_error(m, dequantize(*quantize(m), m)) for m in first)
    # one scale for the whole tensor: a block of small values gets few of the 255 codes
    whole = max(worst_block_error(m, dequantize(*quantize(m, m.numel()), m)) for m in first)
    print(f"  moments: {fp32_bytes:,} B in fp32, {int8_bytes:,} B as int8 + scales "
          f"({int8_bytes / fp32_bytes:.3f}x); exp_avg's worst block error {err:.2%} of that "
          f"block's max (one scale per tensor instead: {whole:.1%})")  # fmt: skip
    kit.check_true("int8 states: 1 byte per value + 4 per block (padded), measured",
                   int8_bytes == expected, f"{int8_bytes} vs {expected}")  # fmt: skip
    kit.check_true(
        "linear int8 error <= half a step of the code (1/254 of each block's max); one scale "
        "per tensor breaks that bound",
        err <= 1 / 254 + 1e-6 < whole,
        f"{err:.5f} <= {1 / 254:.5f} < {whole:.5f}",
    )

# %% [markdown]
# A second moment that rounds to zero is not a small error. AdamW steps each weight by
# `lr · m̂ / (√v̂ + ε)` (bias-corrected moments, ε = 1e-8): the ratio is at most about 1
# whatever the gradient's scale — that is Adam's point. With `v̂` read back as 0 and `m`
# not, the divisor becomes ε, and the step is `lr · m̂ / 1e-8`: for `m̂ ~ 1e-4`, ten
# thousand times `lr`.
# Computed on the entries of these moments where it happens:

# %%
if __name__ == "__main__":
    exact, broken, zeroed, total = [], [], 0, 0
    for state in opt.state.values():
        m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"].item()
        mq, vq = (dequantize(*quantize(x), x) for x in (m, v))
        lost = (vq == 0) & (v != 0) & (mq != 0)  # v read back as 0 under a non-zero m
        zeroed, total = zeroed + ((vq == 0) & (v != 0)).sum().item(), total + v.numel()
        c1, c2 = 1 - 0.9**t, 1 - 0.999**t  # AdamW's bias corrections (betas 0.9, 0.999)
        exact.append(((m / c1) / ((v / c2).sqrt() + 1e-8))[lost].abs())
        broken.append(((mq / c1) / ((vq / c2).sqrt() + 1e-8))[lost].abs())
    exact, broken = torch.cat(exact), torch.cat(broken)
    weights = torch.cat([p.detach().abs().flatten() for p in model.parameters()])
    print(f"  {zeroed} of {total} exp_avg_sq entries became 0; on the {len(broken)} of them "
          f"with m != 0, |m̂ / (√v̂ + ε)| is {exact.median():.2f} (median, exact moments) and "
          f"{broken.median():,.0f} (read back from int8): steps of {broken.median() * 1e-2:.0f} "
          f"at lr 1e-2, for weights of median size {weights.median():.2f}")  # fmt: skip
    kit.check_true(
        "a second moment rounded to 0 turns Adam's ~1-sized update into one > 1000x larger",
        len(broken) > 0 and exact.max() < 10 and broken.min() > 1000 * exact.max(),
        f"{len(broken)} entries: exact <= {exact.max():.2f}, from int8 >= {broken.min():,.0f}",
    )
    k8 = 4 + 2 * (1 + 4 / BLOCK)  # fp32 master + two int8 moments with their scales
    w, g, o = plan.stage_bytes("fsdp", PSI, WORLD, 2, 2, k8)
    print(f"  Qwen2.5-14B, FSDP on 2 GPUs, 8-bit moments: {(w + g + o) / gib:.1f} GiB per GPU "
          f"(32-bit moments: {rows['fsdp'].total / gib:.1f}) — under 80 GiB before activations")  # fmt: skip
    kit.done()

# %% [markdown]
# In order of what they cost: 8-bit states (a little accuracy in the optimizer, *if* the
# code keeps small second moments apart from zero: the dynamic code, or a floor on `v`),
# LoRA (a different, smaller fine-tune), offload (host memory, PCIe time and a CPU optimizer
# step every step). Activations come on top of all of these (lesson 33).
