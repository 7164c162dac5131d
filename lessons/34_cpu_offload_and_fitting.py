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
from minidp.zero import plan
from minidp.zero.memory import measure, storage_bytes

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
# Two ranks, the same model: FSDP2 without offload, with `CPUOffloadPolicy()` (its default
# `pin_memory=True`), with `CPUOffloadPolicy(pin_memory=False)`, and minidp's FSDP. Pinned
# (page-locked) host memory is what lets a GPU copy asynchronously; without an accelerator
# torch cannot pin (a CPU build says it has no accelerator; a CUDA build on a machine without
# a GPU says it found no NVIDIA driver).


# %%
def offload_lesson(rank: int, world: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    out: dict = {}
    x, y = data(rank)
    for how in ("none", "offload, pinned", "offload, not pinned", "minidp"):
        model = make_model()
        try:
            if how == "minidp":
                minidp.fully_shard(model)
            else:
                kw = (
                    {}
                    if how == "none"
                    else {"offload_policy": CPUOffloadPolicy(pin_memory=how == "offload, pinned")}
                )
                fully_shard(model, mesh=init_device_mesh("cpu", (world,)), **kw)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            for _ in range(2):
                F.cross_entropy(model(x), y).backward()
                opt.step()
        except RuntimeError as exc:
            out[how] = f"{type(exc).__name__}: {exc}"
            continue
        local = [getattr(p, "to_local", lambda p=p: p)() for p in model.parameters()]
        grads = [getattr(p.grad, "to_local", lambda g=p.grad: g)() for p in model.parameters()]
        states = [
            getattr(v, "to_local", lambda v=v: v)() for s in opt.state.values() for v in s.values()
        ]
        out[how] = {
            "bytes": [storage_bytes(t) for t in (local, grads, states)],
            "devices": sorted({str(t.device) for t in local + grads + states}),
            "weights": minidp.fsdp.full_state_dict(model) if how == "minidp"
            else {n: p.full_tensor().detach() for n, p in model.named_parameters()},
        }  # fmt: skip
    return out


if __name__ == "__main__":
    kit.title("Lesson 34: CPU offload, LoRA, 8-bit optimizer states")
    if kit.why_no_fsdp2():
        print(f"  (FSDP2 sections skipped: {kit.why_no_fsdp2()})")
    else:
        res = kit.spawn(offload_lesson, WORLD)
        for how, r in res[0].items():
            if isinstance(r, str):
                print(f"  {how:<20}: {r}")
            else:
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
        numel = sum(p.numel() for p in make_model().parameters())
        row = plan.plan(numel, WORLD, 80, precision="fp32")[3]  # FSDP, fp32: 4 + 4 + 8
        got = sum(res[0]["offload, not pinned"]["bytes"])
        kit.check_true(
            "the offloaded states per rank = the planner's FSDP row (within 2%: padding, counters)",
            abs(got - row.total) <= 0.02 * row.total,
            f"{got:,} B measured vs {row.total:,.0f} B",
        )

# %% [markdown]
# Measured: offloaded or not, every tensor is on `cpu` here, and the bytes are the same —
# on a GPU machine the difference is *which memory* holds them. What the planner says
# for Qwen2.5-14B on 2 × 80 GiB (bf16 weights and gradients, fp32 master weights and Adam
# moments, 16 bytes per parameter):

# %%
if __name__ == "__main__":
    rows = {r.stage: r for r in plan.plan(PSI, WORLD, 80)}
    gib = plan.GIB
    layer = (PSI - 2 * 152064 * 5120) / 48  # parameters per decoder layer (lesson 23's shapes)
    print(f"  FSDP, nothing offloaded: {rows['fsdp'].total / gib:.1f} GiB per GPU — does not fit")
    print(f"  FSDP2 + CPUOffloadPolicy: GPU holds ~2 gathered layers in bf16, "
          f"{2 * 2 * layer / gib:.1f} GiB (+ activations); host RAM per rank "
          f"{rows['fsdp'].total / gib:.1f} GiB")  # fmt: skip
    print(f"  ZeRO-Offload (ZeRO-2 + offload): GPU keeps the bf16 weights, {rows['zero2'].weights / gib:.1f} GiB; "
          f"host {(rows['zero2'].grads + rows['zero2'].optimizer) * WORLD / gib:.1f} GiB in all")  # fmt: skip
    print(
        "  per step the shards or gradients cross the host-device link; the AdamW step runs on the CPU"
    )

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
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
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
# few real steps, the bytes measured and the error read back. (Dettmers et al., 2022,
# "8-bit Optimizers via Block-wise Quantization", use a non-linear 8-bit code so that small
# values survive; the linear code below shows why: small second-moment entries round to 0.)

# %%
BLOCK = 256


def quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    flat = t.flatten()
    flat = F.pad(flat, (0, -len(flat) % BLOCK)).view(-1, BLOCK)  # (blocks, BLOCK)
    scale = flat.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)  # (blocks, 1) fp32
    return (flat / scale * 127).round().to(torch.int8), scale.flatten()


def dequantize(q: torch.Tensor, scale: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return (q.float() / 127 * scale[:, None]).flatten()[: like.numel()].view_as(like)


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
    sq = [(m, p) for m, p in zip(moments[1::2], packed[1::2])]
    zeroed = sum(((dequantize(*p, m) == 0) & (m != 0)).sum().item() for m, p in sq)
    first = [(m, p) for m, p in zip(moments[0::2], packed[0::2])]
    err = max(((dequantize(*p, m) - m).abs().max() / m.abs().max()).item() for m, p in first)
    print(f"  moments: {fp32_bytes:,} B in fp32, {int8_bytes:,} B as int8 + scales "
          f"({int8_bytes / fp32_bytes:.3f}x); exp_avg max error {err:.2%} of the block max; "
          f"{zeroed} of {sum(m.numel() for m, _ in sq)} exp_avg_sq entries became 0")  # fmt: skip
    kit.check_true("int8 states: 1 byte per value + 4 per block (padded), measured",
                   int8_bytes == expected, f"{int8_bytes} vs {expected}")  # fmt: skip
    kit.check_true("linear int8 error <= half a step of the code (1/254 of the block max)",
                   err <= 1 / 254 + 1e-6)  # fmt: skip
    k8 = 4 + 2 * (1 + 4 / BLOCK)  # fp32 master + two int8 moments with their scales
    w, g, o = plan.stage_bytes("fsdp", PSI, WORLD, 2, 2, k8)
    print(f"  Qwen2.5-14B, FSDP on 2 GPUs, 8-bit moments: {(w + g + o) / gib:.1f} GiB per GPU "
          f"(32-bit moments: {rows['fsdp'].total / gib:.1f}) — under 80 GiB before activations")  # fmt: skip
    kit.done()

# %% [markdown]
# In order of what they cost: 8-bit states (a little accuracy in the optimizer; none in
# the model), LoRA (a different, smaller fine-tune), offload (host memory and PCIe time
# every step). Activations come on top of all of these (lesson 33).
