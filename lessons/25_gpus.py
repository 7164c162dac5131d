# %% [markdown]
# # Lesson 25 — what changes on GPUs
#
# Run: `python lessons/25_gpus.py` (any machine; the GPU part runs where CUDA is present)
#
# Every lesson so far ran ranks on CPU with gloo. A GPU job is the same program with five
# changes, all keyed by the **local rank** (the rank's index on its machine, lesson 5):
#
# ```python
# local_rank = int(os.environ["LOCAL_RANK"])          # set by torchrun
# torch.cuda.set_device(local_rank)                   # 1. this process owns one GPU
# dist.init_process_group("nccl")                     # 2. NCCL: GPU-to-GPU collectives
# model = model.to(local_rank)
# ddp = DistributedDataParallel(model, device_ids=[local_rank])   # 3. the module's GPU
# loader = DataLoader(data, batch_size=B, sampler=sampler, pin_memory=True)
# for x, y in loader:
#     x = x.to(local_rank, non_blocking=True)         # 4. pinned memory: async copy
#     ...
# state = torch.load(path, map_location=f"cuda:{local_rank}")     # 5. not everyone on GPU 0
# ```
#
# 1. Without `set_device`, every process's `torch.cuda` calls (and NCCL's buffers) go to
#    GPU 0: the ranks pile onto one device. 2. NCCL only moves CUDA tensors; gloo stays
#    for CPU tensors. 3. `device_ids` names the single GPU the module lives on (for a CPU
#    module it must be left out). 4. Page-locked ("pinned") host memory lets the copy to
#    the GPU run asynchronously (`non_blocking=True`): the host-to-GPU copy of a batch
#    overlaps the GPU's compute instead of stalling it. (Loading and preparing the next
#    batch in parallel is the DataLoader workers' job, `num_workers`, not pinning's.)
#    5. A checkpoint
#    records each tensor's device; `map_location` remaps them, or every rank loads
#    rank 0's copy onto GPU 0.
#
# Here: the CPU machine checks what it can (the errors and the remapping); with CUDA, one
# GPU runs a 1-rank NCCL DDP against plain training on that GPU, and two GPUs the 2-rank
# version (skipped with the reason otherwise).

# %%
import io
import os
import warnings

import kit
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as TorchDDP

import minidp

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
STEPS, BATCH = kit.pick(5, 3), 32


def gpu_data() -> list:
    x, y = kit.make_data(STEPS * BATCH)
    return kit.batches(x, y, BATCH)  # CPU tensors, as a DataLoader yields them


def gpu_rank(rank: int, world: int) -> dict:
    """One rank of a GPU job (NCCL group made by minidp.launch), the five changes in use."""
    local_rank = int(os.environ["LOCAL_RANK"])  # minidp.launch sets it, like torchrun
    torch.cuda.set_device(local_rank)  # 1.
    device = torch.device("cuda", local_rank)
    ddp = TorchDDP(kit.make_model().to(device), device_ids=[local_rank])  # 2. NCCL, 3.
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    pinned = []
    for xb, yb in gpu_data():
        xs, ys = xb.chunk(world)[rank].pin_memory(), yb.chunk(world)[rank].pin_memory()
        pinned.append(xs.is_pinned())
        xs, ys = xs.to(device, non_blocking=True), ys.to(device, non_blocking=True)  # 4.
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(xs), ys).backward()
        opt.step()
    buf = io.BytesIO()
    torch.save(ddp.module.state_dict(), buf)  # written from cuda:local_rank
    buf.seek(0)
    saved_on = set()
    torch.load(buf, map_location=lambda s, loc: saved_on.add(loc) or s, weights_only=True)
    buf.seek(0)
    loaded = torch.load(buf, map_location=f"cuda:{local_rank}", weights_only=True)  # 5.
    return {
        "params": [p.detach().cpu() for p in ddp.module.parameters()],
        "pinned": all(pinned),
        "saved_on": sorted(saved_on),
        "loaded_on": sorted({str(t.device) for t in loaded.values()}),
    }


def shared_gpu_rank(rank: int, world: int) -> dict:
    """Two ranks on ONE GPU (gloo: NCCL refuses two ranks per device): torch's DDP and
    minidp's, each with device_ids=[0] and CPU batches the wrapper moves to the GPU."""
    params = {}
    for name, cls in (("torch", TorchDDP), ("minidp", minidp.DistributedDataParallel)):
        ddp = cls(kit.make_model().to("cuda:0"), device_ids=[0])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for xb, yb in gpu_data():
            opt.zero_grad()
            out = ddp(xb.chunk(world)[rank])  # a CPU tensor in, a cuda:0 tensor out
            nn.functional.cross_entropy(out, yb.chunk(world)[rank].to("cuda:0")).backward()
            opt.step()
        params[name] = [p.detach().cpu() for p in ddp.module.parameters()]
    return params


def one_gpu_reference() -> list[torch.Tensor]:
    """Plain training on GPU 0, the whole batch, ordinary (blocking) copies."""
    model = kit.make_model().to("cuda:0")
    data = [(x.to("cuda:0"), y.to("cuda:0")) for x, y in gpu_data()]
    kit.train_single(model, data, lr=0.1)
    return [p.detach().cpu() for p in model.parameters()]


def first_line(exc: BaseException) -> str:
    """The error's type and first line, whole: the useful part of torch's messages is
    often at the end ("but got device_ids [0], ... module parameters {cpu}")."""
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"


# %% [markdown]
# ## 1. On this machine: what each change does without a GPU

# %%
if __name__ == "__main__":
    kit.title("Lesson 25: what changes on GPUs")
    print(f"machine: {kit.machine()}")
    refused = {}
    if not GPUS:
        try:
            torch.cuda.set_device(0)
        except Exception as exc:  # the exception type differs between torch builds
            refused["set_device"] = first_line(exc)
        try:
            torch.empty(4).pin_memory()
        except Exception as exc:
            refused["pin_memory"] = first_line(exc)
        warnings.filterwarnings("ignore", message=".*NCCL support is not compiled.*")
        try:  # a CPU build refuses at init; a CUDA build without GPUs at the first use
            dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
            try:
                dist.all_reduce(torch.zeros(1, device="cuda"))
            finally:
                dist.destroy_process_group()
        except Exception as exc:
            refused["nccl"] = first_line(exc)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            TorchDDP(kit.make_model(), device_ids=[0])
        except ValueError as exc:
            refused["device_ids"] = first_line(exc)
        try:  # minidp's DDP takes torch's arguments and refuses the same way
            minidp.DistributedDataParallel(kit.make_model(), device_ids=[0])
        except ValueError as exc:
            minidp_refused = first_line(exc)
        finally:
            dist.destroy_process_group()
        for what, message in refused.items():
            print(f"{what:>10} -> {message}")
        src = torch.arange(4.0)
        same = src.to("cpu", non_blocking=True) is src  # already there: nothing is copied
        print(f"on CPU, x.to('cpu', non_blocking=True) is x itself: {same} (no copy to overlap)")
    else:
        print(f"{GPUS} GPU(s): {torch.cuda.get_device_name(0)}")

# %% [markdown]
# ## 2. `map_location`: a checkpoint remembers where each tensor lived
# `torch.load(map_location=fn)` shows the recorded location of each storage ("cpu" here;
# "cuda:1" in a file that rank 1 wrote from its GPU); a string or a dict remaps them. On a
# CPU machine we remap to the `meta` device (shapes only, no data) to see it happen.

# %%
if __name__ == "__main__":
    buf = io.BytesIO()
    state = kit.make_model().state_dict()
    torch.save(state, buf)
    seen = []
    buf.seek(0)
    torch.load(
        buf, map_location=lambda storage, loc: seen.append(loc) or storage, weights_only=True
    )
    buf.seek(0)
    remapped = torch.load(buf, map_location={"cpu": "meta"}, weights_only=True)
    buf.seek(0)
    kept = torch.load(buf, map_location="cpu", weights_only=True)
    print(f"recorded locations: {sorted(set(seen))} ({len(seen)} storages)")
    print(
        f"map_location={{'cpu': 'meta'}} -> devices {sorted({str(t.device) for t in remapped.values()})}"
    )

# %% [markdown]
# ## 3. With GPUs: DDP on NCCL, `device_ids`, pinned copies, `map_location`
# One GPU: a 1-rank NCCL DDP trains exactly like plain training on that GPU (one rank's
# all-reduce is the identity, and dividing by 1 is exact). Two or more: 2 ranks, each on
# its own GPU, against one GPU on the whole batch. And the one-GPU classroom: two ranks
# sharing one GPU over gloo, torch's DDP against minidp's, bit for bit (gloo sends from
# host memory, so both copy each bucket through the host: lesson 8, section 3b).

# %%
if __name__ == "__main__":
    gpu_runs = {}
    if GPUS:
        reference = one_gpu_reference()
        for world in (1, 2):
            if world > GPUS:
                print(f"skipped: {world} ranks need {world} GPUs, this machine has {GPUS}")
                continue
            gpu_runs[world] = kit.spawn(gpu_rank, world, backend="nccl")
            print(
                f"{world} rank(s): saved on {gpu_runs[world][0]['saved_on']}, loaded on "
                f"{gpu_runs[world][0]['loaded_on']}"
            )
        shared = kit.spawn(shared_gpu_rank, 2)  # gloo, both ranks on cuda:0
        print("2 ranks on one GPU (gloo): torch's DDP and minidp's trained")
    else:
        print("skipped: no CUDA device here (torch.cuda.is_available() is False)")

# %% [markdown]
# ## Checks

# %%
if __name__ == "__main__":
    kit.check_true(
        "the checkpoint records where its tensors were", set(seen) == {"cpu"}, str(set(seen))
    )
    kit.check_true(
        "map_location remaps every storage",
        all(t.device.type == "meta" and t.shape == state[k].shape for k, t in remapped.items()),
    )
    kit.check("map_location='cpu' loads the saved values", kept, state)
    if not GPUS:
        kit.check_true(
            "without a GPU, set_device, pinned memory, NCCL and device_ids are refused",
            set(refused) == {"set_device", "pin_memory", "nccl", "device_ids"},
            ", ".join(refused),
        )
        kit.check_true(
            "minidp's DDP refuses device_ids on a CPU module with torch's words",
            minidp_refused.startswith(refused["device_ids"].rstrip(".")),
            minidp_refused,
        )
        kit.check_true(
            "the device_ids error is shown whole: what was passed and where the module is",
            "but got device_ids [0]" in refused["device_ids"]
            and "module parameters {device(type='cpu')}" in refused["device_ids"],
            refused["device_ids"],
        )
    for world, ranks in gpu_runs.items():
        # cuBLAS may pick other kernels between runs: close, not claimed bit for bit
        kit.check(
            f"{world}-rank NCCL DDP vs one GPU",
            ranks[0]["params"],
            reference,
            exact=False,
            rtol=1e-4 if world > 1 else 1e-6,
            atol=1e-5 if world > 1 else 1e-7,
        )
        kit.check_true(
            f"{world} rank(s): batches pinned, checkpoint saved on cuda and loaded on cuda:local_rank",
            all(r["pinned"] for r in ranks)
            and all(r["loaded_on"] == [f"cuda:{i}"] for i, r in enumerate(ranks))
            and all(r["saved_on"] == [f"cuda:{i}"] for i, r in enumerate(ranks)),
            str([(r["saved_on"], r["loaded_on"]) for r in ranks]),
        )
        if world > 1:
            kit.check("rank 1's model vs rank 0's", ranks[1]["params"], ranks[0]["params"])
    if GPUS:
        for rank, result in enumerate(shared):
            kit.check(
                f"one GPU, rank {rank}: minidp DDP vs torch DDP", result["minidp"], result["torch"]
            )
    kit.done()
