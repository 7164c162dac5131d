# %% [markdown]
# # Lesson 3 — replicate + parallel_apply = DataParallel
#
# Run: `python lessons/03_data_parallel.py`
# Picture: `diagrams/dp_pipeline.png`
#
# The two middle steps of `nn.DataParallel`, then the whole wrapper:
#
# * **replicate**: every forward, the model on the main device is copied to every other
#   device. Replica 0 *is* the model (same storage); the copies go through a
#   differentiable broadcast whose backward **adds the replicas' gradients on the main
#   device** — that sum is DataParallel's "parameter server";
# * **parallel_apply**: one Python thread per replica, replica i on chunk i.
#
# Then `minidp.DataParallel(model, device_ids=["cpu"] * 4)` trains lesson 1's baseline
# and we compare the trajectory with one device. One process, several threads: the
# articles' "DP is single-process, multi-threaded" — here you can see the threads.
#
# torch's `nn.DataParallel` only knows GPUs: in a process that sees none it *is* the
# plain module, which is what our simulated devices are compared with (on any machine:
# the devices are chosen, not guessed) — the comparison says so.

# %%
import inspect
import threading

import kit
import torch
from torch import nn
from torch.func import functional_call

import minidp
from minidp.dp import gather, parallel_apply, replicate, scatter
from minidp.dp.devices import official_data_parallel
from minidp.textbook import dp as textbook

kit.title("Lesson 3: replicate + parallel_apply -> DataParallel")
torch.set_num_threads(1)  # the replica threads already share the cores
DEVICES = ["cpu"] * 4
STEPS = kit.pick(30, 4)
BATCH = 64

# %% [markdown]
# ## 1. replicate: four replicas, one of them the model itself

# %%
model = kit.make_model(seed=0)
replicas = replicate(model, DEVICES)
w = model[0].weight
for i, r in enumerate(replicas):
    shares = r[0].weight.data_ptr() == w.data_ptr()
    print(
        f"replica {i}: 0.weight {'shares the model storage' if shares else 'is a copy        '}"
        f"  grad_fn={type(r[0].weight.grad_fn).__name__}  parameters(): {len(list(r.parameters()))}"
    )
print("replicas hold plain tensors, not Parameters: you cannot train a replica, only the model")

# %% [markdown]
# ## 2. parallel_apply: one thread per replica

# %%
x, y = kit.make_data(BATCH)
chunks = scatter(x, DEVICES)
seen = {}


def on_thread(i):
    def run(xc):
        seen[i] = threading.current_thread().name  # which thread ran replica i
        return replicas[i](xc)

    return run


outs = parallel_apply([on_thread(i) for i in range(4)], [(c,) for c in chunks], devices=DEVICES)
for i in range(4):
    print(
        f"replica {i} ran on thread {seen[i]!r}: {tuple(chunks[i].shape)} -> {tuple(outs[i].shape)}"
    )

# %% [markdown]
# ## 3. backward: the replicas' gradients are summed into the model's `.grad`
# Hooks on each replica's weight show the four pieces; the model's `.grad` is their sum,
# added on the main device in device order: `((g0 + g1) + g2) + g3`.

# %%
pieces = {}
for i, r in enumerate(replicas):
    r[0].weight.register_hook(lambda g, i=i: pieces.__setitem__(i, g))
nn.functional.cross_entropy(gather(outs, "cpu"), y).backward()
summed = ((pieces[0] + pieces[1]) + pieces[2]) + pieces[3]
for i in range(4):
    print(f"replica {i}: d loss/d 0.weight, norm {pieces[i].norm():.5f}")
print(f"model[0].weight.grad norm {w.grad.norm():.5f} = norm of the sum {summed.norm():.5f}")

# %% [markdown]
# ## 4. The wrapper: train lesson 1's baseline with 4 simulated devices
# `minidp.DataParallel` chains scatter -> replicate -> parallel_apply -> gather on every
# forward. Same model, same batches, same SGD as lesson 1.

# %%
data = kit.batches(*kit.make_data(STEPS * BATCH), BATCH)
single = kit.make_model(seed=0)
single_losses = kit.train_single(single, data)

dp = minidp.DataParallel(kit.make_model(seed=0), device_ids=DEVICES)
dp_losses = kit.train_single(dp, data)  # the same loop; the wrapper is just a module

# torch's wrapper cannot simulate devices: in a process without GPUs,
# nn.DataParallel(model) has device_ids=[] and its forward is the plain module's.
# official_data_parallel picks that for our simulated devices (torch's real wrapper
# for CUDA ones), whatever GPUs this machine has.
official = official_data_parallel(kit.make_model(seed=0), DEVICES)
print("torch.nn.DataParallel for simulated devices: the plain module, full batch")
torch_losses = kit.train_single(official, data)
print(f"{'step':>4} {'one device':>11} {'minidp DP x4':>13} {'torch DP':>9}")
for i in range(0, STEPS, max(STEPS // 6, 1)):
    print(f"{i:>4} {single_losses[i]:>11.6f} {dp_losses[i]:>13.6f} {torch_losses[i]:>9.6f}")
print(f"state_dict keys get a prefix: {list(dp.state_dict())[:2]} ...")

# %% [markdown]
# ## 5. The whole step in one function: the textbook version
# Sections 1-4 in one readable function, top to bottom — scatter with `chunk`, replicate
# with `copy.deepcopy`, one thread per replica, `torch.cat`, then the backward and the
# parameter server's sum written out. This is minidp's own code (`inspect.getsource`):

# %%
shown = inspect.getsource(textbook.parallel_apply)  # its threads, then the step
shown += "\n\n" + inspect.getsource(textbook.data_parallel_step)
print(shown)

# %% [markdown]
# What the faithful `minidp.DataParallel` (sections 1-4) adds to it:
# * it is a *module*: `forward` returns the gathered output and your own `loss.backward()`
#   does the rest, because replicate is a differentiable broadcast whose backward **is**
#   the device-order sum written out above (`replicate.Broadcast`);
# * replicas are shallow copies sharing everything but the tensors, and replica 0 *is* the
#   model (no `deepcopy` of every submodule every step);
# * inputs and outputs of any structure (tuples, dicts, namedtuples, kwargs);
# * the caller's grad mode / autocast / CUDA stream in every thread, a failing replica
#   re-raised with its index and device, and a check that the model is on `device_ids[0]`.
#
# Same bits: the check below runs both on the same batch.

# %%
tb_model, dp_model = kit.make_model(seed=0), kit.make_model(seed=0)
xb, yb = data[0]
tb_out, tb_loss = textbook.data_parallel_step(
    tb_model, xb, yb, nn.functional.cross_entropy, DEVICES
)
dp_out2 = minidp.DataParallel(dp_model, device_ids=DEVICES)(xb)
nn.functional.cross_entropy(dp_out2, yb).backward()
print(f"textbook step: loss {tb_loss.item():.6f}; minidp.DataParallel: same batch, same model")

# %% [markdown]
# ## 6. Checks
# * **the definition of a DP step, bit for bit**: every chunk goes through its own copy of
#   the parameters (here `torch.func.functional_call` with per-chunk leaf copies, no
#   threads, no replicate), outputs are concatenated, and the per-chunk gradients are
#   summed in device order — minidp's step must produce the same bits;
# * training with 4 simulated devices vs one device (lesson 1): the same numbers up to
#   float32 rounding (the batch is split, so the sums round differently);
# * `torch.nn.DataParallel` on this machine = one device, bit for bit.

# %%
step_model = kit.make_model(seed=0)
xb, yb = data[0]
dp_step = minidp.DataParallel(step_model, device_ids=DEVICES)
dp_out = dp_step(xb)
nn.functional.cross_entropy(dp_out, yb).backward()

ref = kit.make_model(seed=0)
names = [n for n, _ in ref.named_parameters()]
copies = [
    {n: p.detach().clone().requires_grad_() for n, p in ref.named_parameters()} for _ in range(4)
]
ref_out = torch.cat([functional_call(ref, c, (xc,)) for c, xc in zip(copies, xb.chunk(4))])
nn.functional.cross_entropy(ref_out, yb).backward()
ref_grads = [
    ((copies[0][n].grad + copies[1][n].grad) + copies[2][n].grad) + copies[3][n].grad for n in names
]

kit.check("model .grad vs ((g0 + g1) + g2) + g3 from the replica hooks (section 3)", w.grad, summed)
kit.check("DP output vs per-chunk definition", dp_out, ref_out)
kit.check(
    "DP gradients vs per-chunk gradients summed in device order",
    [p.grad for p in step_model.parameters()],
    ref_grads,
)
kit.check(
    "4 simulated devices vs one device, after training",
    dp.module,
    single,
    exact=False,
    rtol=1e-4,
    atol=1e-5,
)
kit.check("torch.nn.DataParallel (CPU: plain module) vs one device", official, single)
kit.check_true(
    "the step shown in section 5 is minidp.textbook.dp's own functions, not a copy",
    textbook.data_parallel_step.__module__ == "minidp.textbook.dp"
    and shown in inspect.getsource(textbook),
)
kit.check(
    "textbook step vs minidp.DataParallel: output and every gradient",
    [tb_out, *[p.grad for p in tb_model.parameters()]],
    [dp_out2, *[p.grad for p in dp_model.parameters()]],
)
kit.done()

# %% [markdown]
# ## Your turn
# Write the step yourself; the checker runs it against `torch.nn.DataParallel`:
# `python -m minidp exercise check data_parallel_step` (stub: `lessons/exercises/data_parallel_step.py`).

# %%
print("Exercise: python -m minidp exercise check data_parallel_step")
