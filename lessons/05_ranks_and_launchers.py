# %% [markdown]
# # Lesson 5 — processes, ranks, nodes, and what `torchrun` sets
#
# Run: `python lessons/05_ranks_and_launchers.py`
#
# DataParallel (lessons 2–4) is one process driving several devices with threads.
# Everything from here on is **one process per device**: each process is a *rank*.
#
# | word | meaning | where it comes from |
# |---|---|---|
# | world size | number of processes in the job | `WORLD_SIZE`, `dist.get_world_size()` |
# | rank | this process's index in the job, `0 .. world-1` | `RANK`, `dist.get_rank()` |
# | node | one machine | `torchrun --nnodes` |
# | local rank | index among the processes *on this node* (picks the GPU) | `LOCAL_RANK`, `dist.get_node_local_rank()` |
# | local world size | processes on this node | `LOCAL_WORLD_SIZE` |
# | group rank | this node's index | `GROUP_RANK` (`--node-rank`) |
#
# `rank = group_rank * local_world_size + local_rank` when every node runs the same
# number of processes. `torch.distributed` offers the local rank as
# `dist.get_node_local_rank()` (present in every torch this course supports, 2.4 on), but
# it only reads the `LOCAL_RANK` that the launcher put in the environment: without a
# launcher it raises, or returns the `fallback_rank` you pass it.
#
# `init_process_group(backend)` with the default `env://` method reads `RANK`,
# `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, connects to the rendezvous store on the
# master, and builds the group. Backends: **gloo** (CPU tensors, also GPU), **NCCL**
# (NVIDIA GPUs only, one GPU per rank, the fast one for GPU training).
#
# We look at all of this on real processes: first minidp's launcher, then the real
# `torchrun`, and check that they hand a rank the same facts.

# %%
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import kit
import torch
import torch.distributed as dist

import minidp

ENV_KEYS = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
]
LESSON = kit.HERE / "05_ranks_and_launchers.py"


def who_am_i(rank: int, world_size: int) -> dict:
    """Runs in every rank process: what does this process know about itself?"""
    env = {k: os.environ.get(k) for k in ENV_KEYS}
    kit.say(rank, f"pid {os.getpid()}  RANK={env['RANK']} LOCAL_RANK={env['LOCAL_RANK']}")
    return {
        "pid": os.getpid(),
        "dist_rank": dist.get_rank(),
        "dist_world": dist.get_world_size(),
        "backend": dist.get_backend(),
        # torch >= 2.4 (minidp's floor) reads LOCAL_RANK for you; raises if it is not set
        "node_local_rank": dist.get_node_local_rank(),
        "env": env,
    }


def torchrun_worker() -> None:
    """What this file does when torchrun starts it: join the group via env://, report."""
    dist.init_process_group("gloo")  # init_method defaults to "env://"
    env = {k: os.environ.get(k) for k in ENV_KEYS + ["OMP_NUM_THREADS", "TORCHELASTIC_RUN_ID"]}
    report = {"dist_rank": dist.get_rank(), "dist_world": dist.get_world_size(), "env": env}
    # one file per rank: two processes printing to one pipe can interleave their lines
    out = os.path.join(os.environ["LESSON05_REPORTS"], f"rank{dist.get_rank()}.json")
    with open(out, "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()


# %% [markdown]
# Under `torchrun` this same file is started once per rank; it then only reports and
# exits (the lesson itself runs in the process you started).

# %%
if __name__ == "__main__" and minidp.launch.launched_by_torchrun():
    torchrun_worker()
    sys.exit(0)

# %% [markdown]
# ## 1. Four rank processes with `minidp.launch.spawn`
# `spawn(fn, 4)` starts 4 Python processes (2 in fast mode), joins them in one gloo group and runs
# `fn(rank, world_size)` in each. Each rank prints its own line, prefixed with its rank —
# in whatever order the processes get there.

# %%
if __name__ == "__main__":
    kit.title("Lesson 5: processes, ranks, world size, nodes, torchrun's variables")
    WORLD = kit.pick(4, 2)  # fast mode: fewer processes to start
    reports = kit.spawn(who_am_i, WORLD)
    print(f"\n{'rank':>4} {'pid':>7} {'RANK':>4} {'LOCAL_RANK':>10} {'WORLD_SIZE':>10} backend")
    for r, rep in enumerate(reports):
        e = rep["env"]
        print(
            f"{r:>4} {rep['pid']:>7} {e['RANK']:>4} {e['LOCAL_RANK']:>10} {e['WORLD_SIZE']:>10} "
            f"{rep['backend']}"
        )
    print(f"{WORLD} different pids: {len({rep['pid'] for rep in reports}) == WORLD}")

# %% [markdown]
# ## 2. Nodes: global rank from (node, local rank)
# With 2 machines × 2 processes, `torchrun` numbers the ranks node by node. Lesson 17
# runs exactly this layout for real (two `torchrun` invocations on 127.0.0.1).

# %%
if __name__ == "__main__":
    nnodes, nproc = 2, 2
    print(f"{'node (GROUP_RANK)':>18} {'LOCAL_RANK':>10} {'RANK':>5}")
    for node in range(nnodes):
        for local in range(nproc):
            print(f"{node:>18} {local:>10} {node * nproc + local:>5}")
    print("LOCAL_RANK picks the device on the node (cuda:LOCAL_RANK); RANK picks the data shard.")

# %% [markdown]
# ## 3. The real `torchrun`
# `torchrun --standalone --nproc-per-node 2 lessons/05_ranks_and_launchers.py`:
# torchrun starts 2 copies of this file; each calls `init_process_group("gloo")` with
# nothing but the environment and prints a report.

# %%
if __name__ == "__main__":
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    print("$ torchrun --standalone --nproc-per-node 2", LESSON.name)
    reports_dir = tempfile.mkdtemp(prefix="lesson05-")
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS + ["OMP_NUM_THREADS"]}
    env["LESSON05_REPORTS"] = reports_dir
    proc = subprocess.run(cmd + [str(LESSON)], capture_output=True, text=True, timeout=120, env=env)
    # the ranks' own tracebacks come before torchrun's summary: show both
    assert proc.returncode == 0, (
        f"torchrun exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-8000:]}"
    )
    runs = [json.loads((Path(reports_dir) / f"rank{r}.json").read_text()) for r in range(2)]
    shutil.rmtree(reports_dir)  # read: the reports live on in `runs`
    for rep in runs:
        e = rep["env"]
        kit.say(
            rep["dist_rank"],
            " ".join(f"{k}={e[k]}" for k in ENV_KEYS),
            f"OMP_NUM_THREADS={e['OMP_NUM_THREADS']}",
        )
    if "OMP_NUM_THREADS" in proc.stderr:
        print("torchrun also warned: it set OMP_NUM_THREADS=1 so 2 ranks do not fight for cores")
    print("\nthe same with minidp's launcher, minidp.launch.spawn(who_am_i, 2):")
    mine2 = reports if WORLD == 2 else kit.spawn(who_am_i, 2)

# %% [markdown]
# ## 4. Without a launcher, nobody sets them
# One article says that on a single machine "PyTorch handles these variables
# automatically". It does not: `torchrun` sets them; `torch.multiprocessing.spawn` does
# not, which is why every `mp.spawn` DDP tutorial sets `MASTER_ADDR`/`MASTER_PORT` by
# hand. A process that calls `init_process_group("gloo", rank=0, world_size=1)` with a
# clean environment:

# %%
if __name__ == "__main__":
    code = "import torch.distributed as d; d.init_process_group('gloo', rank=0, world_size=1)"
    bare = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    no_launcher_error = (bare.stderr.strip().splitlines() or [""])[-1]
    print(f"exit code {bare.returncode}: {no_launcher_error}")

# %% [markdown]
# ## 5. gloo vs NCCL on this machine
# NCCL needs NVIDIA GPUs (and a CUDA build of torch); on a CPU-only machine asking for
# it fails at `init_process_group`. gloo runs everywhere — all of minidp's lessons use it.

# %%
if __name__ == "__main__":
    print(
        f"gloo available: {dist.is_gloo_available()}   NCCL available: {dist.is_nccl_available()}"
    )
    print(f"CUDA devices: {torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    warnings.filterwarnings("ignore", message=".*NCCL support is not compiled.*")
    try:
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        print("init_process_group('nccl') worked: this machine has GPUs")
        dist.destroy_process_group()
        nccl_error = ""
    except Exception as exc:  # what a learner sees when asking for NCCL without GPUs
        nccl_error = str(exc).splitlines()[0]
        print(f"init_process_group('nccl') -> {type(exc).__name__}: {nccl_error[:160]}")

# %% [markdown]
# ## 6. Check against torchrun
# The variables `init_process_group("env://")` needs, and the rank facts, must be the
# same whether minidp's launcher or the real torchrun started the process.

# %%
if __name__ == "__main__":
    kit.check_true(
        "every spawned rank: RANK == dist.get_rank(), WORLD_SIZE == dist.get_world_size()",
        all(
            int(rep["env"]["RANK"]) == rep["dist_rank"] == r
            and int(rep["env"]["WORLD_SIZE"]) == rep["dist_world"] == WORLD
            for r, rep in enumerate(reports)
        ),
    )
    kit.check_true(
        "every spawned rank: dist.get_node_local_rank() == LOCAL_RANK",
        all(rep["node_local_rank"] == int(rep["env"]["LOCAL_RANK"]) for rep in reports),
    )
    kit.check_true(
        "torchrun set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT and env:// init used them",
        [rep["dist_rank"] for rep in runs] == [0, 1]
        and all(rep["env"][k] for rep in runs for k in ENV_KEYS),
    )
    same = all(
        mine["env"][k] == theirs["env"][k]
        for mine, theirs in zip(mine2, runs)
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    )
    kit.check_true(
        "minidp.launch.spawn(fn, 2) gives each rank the same RANK/LOCAL_RANK/WORLD_SIZE/"
        "LOCAL_WORLD_SIZE/GROUP_RANK as torchrun --nproc-per-node 2",
        same,
    )
    kit.check_true(
        "torchrun set OMP_NUM_THREADS=1 for its 2 workers",
        all(rep["env"]["OMP_NUM_THREADS"] == "1" for rep in runs),
    )
    kit.check_true(
        "init_process_group without a launcher fails: MASTER_ADDR not set",
        bare.returncode != 0 and "MASTER_ADDR" in no_launcher_error,
    )
    kit.check_true(
        "NCCL is refused without GPUs (or works with them)",
        torch.cuda.is_available() or bool(nccl_error),
        nccl_error[:80],
    )
    kit.done()
