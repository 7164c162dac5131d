# %% [markdown]
# # Lesson 4 — DataParallel's main-device bottleneck, measured
#
# Run: `python lessons/04_dp_bottleneck.py`
# Picture: `diagrams/dp_pipeline.png` (one traced DP step and its bytes per device)
#
# The articles say DP's main GPU "is overloaded while the others are under-used", that it
# runs out of memory first, that the model is copied every iteration, and that the
# threads fight over Python's GIL. Instead of repeating that, we measure each claim on
# one DP step with n simulated devices:
#
# 1. **bytes per device** (`minidp.tools.planner.dp_memory.memory_report`): what each device holds;
# 2. **traffic through the main device**, stage by stage, counted from the actual tensors
#    that cross a device boundary: scatter (inputs out), replicate (parameters out, every
#    step), gather (outputs in), backward (output gradients out, parameter gradients in);
# 3. the same count for DDP's ring all-reduce of the gradients (lesson 8), on real ranks;
# 4. the GIL: replicas on threads vs one after another.

# %%
import statistics

import kit
import torch
from torch import nn

import minidp
from minidp.dp import gather, parallel_apply, replicate, scatter
from minidp.dp.devices import official_data_parallel
from minidp.tools.bench.verdict import compare, interleave
from minidp.tools.planner.dp_memory import memory_report

kit.title("Lesson 4: DP's main-device bottleneck, measured")
torch.set_num_threads(1)
WIDTH = kit.pick(256, 64)
BATCH = kit.pick(512, 64)
WORLDS = kit.pick([2, 4, 8], [2, 4])


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


model = kit.make_model(seed=0, width=WIDTH, depth=3)
P = sum(nbytes(p) for p in model.parameters())
x, y = kit.make_data(BATCH)
print(f"model: {P:,} bytes of parameters; batch {BATCH} x {x.shape[1]} features")

# %% [markdown]
# ## 1. Bytes per device (4 devices)

# %%
dp = minidp.DataParallel(model, device_ids=["cpu"] * 4)
report = memory_report(dp, x, loss_fn=lambda out: nn.functional.cross_entropy(out, y))
print(report)

# %% [markdown]
# ## 2. Traffic through the main device, per stage
# Device 0 is the main device. A tensor "moves" when it is produced for a device other
# than the one holding its source: chunk i of the batch, replica i's parameters, output
# i, the gradient block sent back to replica i, and replica i's parameter gradients.


# %%
def dp_step_traffic(n: int) -> dict:
    devices = ["cpu"] * n
    model.zero_grad()
    chunks = scatter(x, devices)
    replicas = replicate(model, devices)
    originals = {p.data_ptr() for p in model.parameters()}
    copies = [
        sum(nbytes(t) for t in vars_tensors(r) if t.data_ptr() not in originals) for r in replicas
    ]
    outs = parallel_apply(replicas, [(c,) for c in chunks], devices=devices)
    for o in outs:
        o.retain_grad()
    grad_bytes = [0] * n
    for i, r in enumerate(replicas):
        for t in vars_tensors(r):
            t.register_hook(lambda g, i=i: grad_bytes.__setitem__(i, grad_bytes[i] + nbytes(g)))
    nn.functional.cross_entropy(gather(outs, "cpu"), y).backward()
    others = range(1, n)
    return {
        "scatter: inputs out": sum(nbytes(chunks[i]) for i in others),
        "replicate: parameters out": sum(copies[i] for i in others),
        "gather: outputs in": sum(nbytes(outs[i]) for i in others),
        "backward: output grads out": sum(nbytes(outs[i].grad) for i in others),
        "backward: parameter grads in": sum(grad_bytes[i] for i in others),
        "per other device": copies[1] + grad_bytes[1] + nbytes(chunks[1]) + 2 * nbytes(outs[1]),
    }


def vars_tensors(replica: nn.Module) -> list[torch.Tensor]:
    """A replica's parameter tensors (plain attributes after replicate)."""
    return [v for m in replica.modules() for k, v in vars(m).items() if k in ("weight", "bias")]


def ring_traffic(rank: int, world: int) -> int:
    grads = torch.zeros(P // 4)  # every rank all-reduces one flat copy of the gradients
    with minidp.comm.count_traffic() as t:
        minidp.comm.ring_all_reduce(grads)
    with minidp.comm.count_traffic() as header:  # minidp's call check alone, subtracted
        minidp.comm.barrier()
    return t.sent_bytes + t.recv_bytes - header.sent_bytes - header.recv_bytes


traffic = {n: dp_step_traffic(n) for n in WORLDS}
ring = {n: minidp.launch.run_threads(ring_traffic, n) for n in WORLDS}
stages = [k for k in traffic[WORLDS[0]] if k != "per other device"]
print(f"{'bytes per step':<30}" + "".join(f"{f'n={n}':>13}" for n in WORLDS))
for k in stages:
    print(f"{k:<30}" + "".join(f"{traffic[n][k]:>13,}" for n in WORLDS))
main_total = {n: sum(traffic[n][k] for k in stages) for n in WORLDS}
print(f"{'main device, in + out':<30}" + "".join(f"{main_total[n]:>13,}" for n in WORLDS))
print(
    f"{'any other device, in + out':<30}"
    + "".join(f"{traffic[n]['per other device']:>13,}" for n in WORLDS)
)
print(f"{'DDP: ring all-reduce of grads':<30}" + "".join(f"{max(ring[n]):>13,}" for n in WORLDS))
print(
    "\nDP's main device moves ~2(n-1)·P of parameters and gradients per step (and the\n"
    "batch's inputs/outputs); every DDP rank moves 4(n-1)/n·P (send + receive), nearly\n"
    "flat in n, and no rank is special."
)

# %% [markdown]
# ## 3. The GIL: replicas on threads vs one after another
# torch releases the GIL inside its kernels, so threads overlap only while a kernel
# runs; all the Python in between (module calls, hooks, autograd bookkeeping) is
# serialised. On 2 cores, small layers are Python-bound.

# %%
replicas = replicate(model, ["cpu"] * 4)
chunks = scatter(x, ["cpu"] * 4)
repeats = kit.pick(21, 9)

# The three take turns call by call, so a burst of load elsewhere hits all of them alike;
# each turn gives one "threads / in turn" ratio, and the verdict reads their spread.
with torch.no_grad():
    times = interleave(
        {
            "threads": lambda: parallel_apply(
                replicas, [(c,) for c in chunks], devices=["cpu"] * 4
            ),
            "in turn": lambda: [r(c) for r, c in zip(replicas, chunks)],
            "whole": lambda: model(x),
        },
        repeats,
    )
gil = compare(times["in turn"], times["threads"], "one after another", "4 threads")
print(f"the plain model on the whole batch: {statistics.median(times['whole']) * 1e3:.2f} ms")
print(f"({kit.machine()})")
print(gil.sentence())
if gil.verdict == "slower":
    print(
        "threads cost time here: with layers this small, Python (and its GIL) dominates; on\n"
        "GPUs the threads mostly launch kernels, and the imbalance of section 2 is what hurts"
    )
else:
    print(
        "threads did not cost time beyond the noise here; with layers this small, Python (and\n"
        "its GIL) usually dominates — on GPUs the imbalance of section 2 is what hurts"
    )

# %% [markdown]
# ## 4. Checks
# * the measured parameter traffic is exactly `(n-1)·P` out (replicate) and `(n-1)·P` in
#   (gradients), and the batch's rows that leave the main device are `(B - B/n)` rows;
# * the main device holds more bytes than any other (memory report);
# * the gradient the main device ends up with equals `torch.nn.DataParallel`'s (on this
#   CPU-only machine, the plain module on the whole batch), up to rounding.

# %%
row = x.shape[1] * x.element_size()
for n in WORLDS:
    t = traffic[n]
    first = len(x.chunk(n)[0])
    kit.check_true(
        f"n={n}: replicate sends (n-1)*P = {(n - 1) * P:,} bytes, gradients bring back the same, "
        f"scatter sends {BATCH - first} rows",
        t["replicate: parameters out"] == t["backward: parameter grads in"] == (n - 1) * P
        and t["scatter: inputs out"] == (BATCH - first) * row,
    )
    kit.check_true(
        f"n={n}: DDP ring moves 4(n-1)/n*P = {4 * (n - 1) * P // n:,} bytes per rank",
        all(abs(b - 4 * (n - 1) * P / n) <= 1e-3 * P for b in ring[n]),
        str(ring[n]),
    )
rows = report.rows
kit.check_true(
    "main device holds the most bytes",
    all(rows[0].total > r.total for r in rows[1:]),
    f"{rows[0].total:,} vs {max(r.total for r in rows[1:]):,}",
)
twin = kit.make_model(seed=0, width=WIDTH, depth=3)
official = official_data_parallel(twin, ["cpu"] * 4)  # simulated: torch's is the plain module
nn.functional.cross_entropy(official(x), y).backward()
dp_model = kit.make_model(seed=0, width=WIDTH, depth=3)
nn.functional.cross_entropy(minidp.DataParallel(dp_model, device_ids=["cpu"] * 4)(x), y).backward()
kit.check(
    "main device's gradient (4 devices) vs torch.nn.DataParallel",
    [p.grad for p in dp_model.parameters()],
    [p.grad for p in twin.parameters()],
    exact=False,
)
kit.done()
