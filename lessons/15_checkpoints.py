# %% [markdown]
# # Lesson 15 — checkpoints: save on rank 0, `barrier`, load with `map_location`
#
# Run: `python lessons/15_checkpoints.py`
#
# Every rank holds the same model, so **one** rank (rank 0) writes the checkpoint — N
# ranks writing one file would race. Then everybody may need it (resume, evaluation).
# Four things go wrong in practice, each shown broken, then fixed, on 2 real ranks:
#
# 1. **loading before the save finished**: rank 1 reaches `torch.load` while rank 0 is
#    still writing -> file not found (or half a file). Fix: `barrier()` after the save;
# 2. **no `map_location`**: a checkpoint written on `cuda:0` records that device in the
#    file; loading it on a machine without GPUs fails, and on a GPU machine every rank
#    would load it onto GPU 0. Fix: `map_location="cpu"` (or `f"cuda:{local_rank}"`);
# 3. **`weights_only`** (default `True` since torch 2.6; torch 2.4 and 2.5 default to
#    `False`, which runs whatever code the pickle names): a checkpoint holding arbitrary
#    Python objects (a config dataclass) is refused. Fix: save plain types (tensors,
#    dicts, numbers, strings), and pass `weights_only=True` explicitly so every torch
#    version loads the same way;
# 4. **the `module.` prefix**: `ddp.state_dict()` keys start with `module.`; a plain model
#    will not load them. Fix: save `ddp.module.state_dict()`.
#
# Then: resume from the checkpoint and land on the same bits as a run that never stopped.

# %%
import dataclasses
import os
import pickle
import re
import tempfile
import time
from pathlib import Path

import kit
import torch
import torch.serialization as serialization
from torch import nn

import minidp
from minidp.comm import barrier

STEPS = 4  # the checkpoint is written after step 2
SLOW_DISK_S = kit.pick(0.5, 0.1)  # rank 0 "takes" this long to write


@dataclasses.dataclass
class Config:  # an arbitrary Python object: what weights_only refuses
    lr: float = 0.1


def train_steps(ddp, opt, data) -> None:
    for xb, yb in data:
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(xb), yb).backward()
        opt.step()


def save_as_if_on_gpu(obj, path: Path) -> None:
    """torch.save, but the file records device 'cuda:0' for every tensor — exactly what a
    GPU job writes. (A temporary storage tagger; torch.save asks the taggers in order.)"""
    tagger = lambda storage: "cuda:0"  # noqa: E731
    serialization.register_package(0, tagger, lambda storage, location: None)
    try:
        torch.save(obj, path)
    finally:
        serialization._package_registry[:] = [
            e for e in serialization._package_registry if e[1] is not tagger
        ]


# %% [markdown]
# ## 1. Broken: loading before the save finished
# No barrier between rank 0's save and the other ranks' load. In a real job this is a race
# that a big model on a slow disk loses; here rank 0 writes only after rank 1 has tried, so
# the lesson shows the unlucky order every time.


# %%
def load_too_early(rank: int, folder: Path, ddp) -> str | None:
    early = folder / "early.pt"
    result = None
    if rank != 0:
        try:
            torch.load(early, map_location="cpu", weights_only=True)
            result = "loaded"
        except (FileNotFoundError, RuntimeError, EOFError) as exc:
            result = f"{type(exc).__name__}: {str(exc)[:90]}"
            kit.say(rank, f"loaded too early -> {result}")
    barrier()  # (only to force the order above)
    if rank == 0:
        torch.save(ddp.module.state_dict(), early)
    barrier()
    return result


# %% [markdown]
# ## Fixed: save on rank 0 -> `barrier()` -> everybody loads
# Written to a temporary name and renamed (atomic), so nobody ever sees half a file.


# %%
def save_then_load(rank: int, folder: Path, ddp, opt) -> dict:
    ckpt = folder / "step2.pt"
    if rank == 0:
        time.sleep(SLOW_DISK_S)
        state = {"model": ddp.module.state_dict(), "optim": opt.state_dict(), "step": 2}
        tmp = ckpt.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, ckpt)  # atomic: nobody ever sees half a file
        kit.say0(rank, f"rank 0 saved {ckpt.name}")
    barrier()  # nobody passes until rank 0 has finished writing
    loaded = torch.load(ckpt, map_location="cpu", weights_only=True)
    kit.say(
        rank,
        f"loaded {ckpt.name} after the barrier: step {loaded['step']}, {len(loaded['model'])} tensors",
    )
    return loaded


# %% [markdown]
# ## 2. `map_location`: a checkpoint written by a GPU job


# %%
def load_gpu_checkpoint(rank: int, folder: Path, state: dict) -> tuple[str, dict]:
    gpu_file = folder / "from_gpu.pt"
    if rank == 0:
        save_as_if_on_gpu(state, gpu_file)
    barrier()
    try:
        torch.load(gpu_file, weights_only=True)
        refused = "loaded (this machine has a GPU)"
    except (RuntimeError, pickle.UnpicklingError) as exc:  # torch < 2.6 wraps it in the latter
        cause = re.search(r"Attempting to deserialize object on a CUDA device[^.]*", str(exc))
        refused = cause[0] if cause else str(exc).splitlines()[0]
    return refused, torch.load(gpu_file, map_location="cpu", weights_only=True)


# %% [markdown]
# ## 3. `weights_only` refuses arbitrary objects


# %%
def load_object_checkpoint(rank: int, folder: Path, state: dict) -> str:
    obj_file = folder / "with_object.pt"
    if rank == 0:
        torch.save({"model": state, "config": Config()}, obj_file)
    barrier()
    try:
        # explicit: the default since torch 2.6, but torch 2.4/2.5 would load the object
        torch.load(obj_file, map_location="cpu", weights_only=True)
        return "loaded"
    except pickle.UnpicklingError as exc:  # the type on every torch from 2.4 to 2.15
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # torch bolds a phrase with ANSI codes
        return f"{type(exc).__name__}: " + " ".join(text.split())[:100]


# %% [markdown]
# ## 4. The `module.` prefix


# %%
def load_into_plain_model(ddp) -> str:
    plain = kit.make_model(seed=1)
    try:
        plain.load_state_dict(ddp.state_dict())
        return "loaded"
    except RuntimeError as exc:
        return " ".join(str(exc).split())


# %% [markdown]
# ## Resume, and run it all on 2 real ranks
# A fresh model and optimizer (other weights: overwritten) load the step-2 checkpoint and
# train 2 more steps, beside the run that never stopped and torch's DDP on the same data.


# %%
def checkpoint_lesson(rank: int, world: int, folder: str) -> dict:
    folder = Path(folder)
    x, y = kit.make_data(STEPS * 32, seed=rank)
    data = kit.batches(x, y, 32)
    ddp = minidp.DistributedDataParallel(kit.make_model(seed=0))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    train_steps(ddp, opt, data[:2])
    out: dict = {"keys": list(ddp.state_dict())}
    out["early"] = load_too_early(rank, folder, ddp)
    loaded = save_then_load(rank, folder, ddp, opt)
    out["step2"] = loaded["model"]
    out["no map_location"], out["with map_location"] = load_gpu_checkpoint(
        rank, folder, loaded["model"]
    )
    out["weights_only"] = load_object_checkpoint(rank, folder, loaded["model"])
    out["prefix"] = load_into_plain_model(ddp)

    resumed = minidp.DistributedDataParallel(kit.make_model(seed=7))
    resumed.module.load_state_dict(loaded["model"])
    opt2 = torch.optim.SGD(resumed.parameters(), lr=0.1, momentum=0.9)
    opt2.load_state_dict(loaded["optim"])
    train_steps(resumed, opt2, data[2:])
    train_steps(ddp, opt, data[2:])  # the run that never stopped
    out["resumed"], out["continuous"] = resumed.module, ddp.module
    ref = nn.parallel.DistributedDataParallel(kit.make_model(seed=0))
    train_steps(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), data)
    out["torch"], out["torch keys"] = ref.module, list(ref.state_dict())
    barrier()
    return out


if __name__ == "__main__":
    kit.title("Lesson 15: checkpoints — save on rank 0, barrier, map_location, weights_only")
    with tempfile.TemporaryDirectory(prefix="lesson15-") as folder:
        res = kit.spawn(checkpoint_lesson, 2, folder)
    r1 = res[1]
    print(f"\n1. load without a barrier:      {r1['early']}")
    print(f"2. load a GPU checkpoint here:  {r1['no map_location'][:110]}...")
    print("   with map_location='cpu':     loaded")
    print(f"3. load a checkpoint holding a Config object: {r1['weights_only']}...")
    missing = r1["prefix"].split("Unexpected key(s)")[0][:100]
    unexpected = "Unexpected key(s)" + r1["prefix"].split("Unexpected key(s)")[-1][:60]
    print(f"4. plain model <- ddp.state_dict(): {missing}...\n   {unexpected}...")

# %% [markdown]
# ## Checks

# %%
if __name__ == "__main__":
    kit.check_true(
        "1. without a barrier, rank 1 did not find the file",
        r1["early"].startswith("FileNotFoundError"),
    )
    kit.check_true(
        "2. without map_location a cuda:0 checkpoint is refused here; with it, it loads",
        "CUDA" in r1["no map_location"] or "loaded" in r1["no map_location"],
    )
    kit.check(
        "2. the map_location='cpu' load == the checkpoint's weights",
        r1["with map_location"],
        r1["step2"],
    )
    kit.check_true(
        "3. weights_only refused the Config object",
        "Weights only load failed" in r1["weights_only"],
    )
    kit.check_true(
        "4. ddp.state_dict() keys carry 'module.'",
        "Unexpected key(s)" in r1["prefix"] and all(k.startswith("module.") for k in r1["keys"]),
    )
    kit.check_true(
        "minidp DDP's state_dict keys == torch DDP's",
        r1["keys"] == r1["torch keys"],
        str(r1["keys"][:2]),
    )
    for r in range(2):
        kit.check(
            f"rank {r}: resumed from the step-2 checkpoint vs never stopped",
            res[r]["resumed"],
            res[r]["continuous"],
        )
        kit.check(
            f"rank {r}: minidp DDP (4 steps) vs torch DDP (4 steps)",
            res[r]["continuous"],
            res[r]["torch"],
        )
    kit.done()

# %% [markdown]
# ## Your turn
# Save on rank 0 and load on every rank yourself; the checker compares what every rank
# loaded with `torch.save`/`torch.load` of the same state:
# `python -m minidp exercise check checkpoint`.

# %%
if __name__ == "__main__":
    print("Exercise: python -m minidp exercise check checkpoint")
