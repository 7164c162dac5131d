# %% [markdown]
# # Lesson 17 — beyond one machine: the same script under `torchrun --nnodes 2`
#
# Run: `python lessons/17_multi_node_torchrun.py`
#
# Nothing in a DDP script knows how many machines there are: it reads `RANK`,
# `WORLD_SIZE`, `LOCAL_RANK` from the environment (lesson 5) and joins the group. What
# changes is the launch: one `torchrun` per machine, all pointed at the same rendezvous
# endpoint. Here the two "machines" are two `torchrun` invocations on this host, with
# c10d rendezvous on 127.0.0.1:
#
#     torchrun --nnodes 2 --nproc-per-node 2 --node-rank 0 \
#              --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT --rdzv-id lesson17 17_multi_node_torchrun.py
#     torchrun --nnodes 2 --nproc-per-node 2 --node-rank 1  ...same...
#
# 2 nodes x 2 processes = 4 ranks. Each trains with `minidp.DistributedDataParallel` and,
# in the same process, `torch.nn.parallel.DistributedDataParallel`, on its
# `DistributedSampler` share, and reports. And one pitfall from an article's example,
# which passes **`LOCAL_RANK`** to `DistributedSampler` "on several machines": local
# ranks repeat on every node, so two nodes read the *same* samples and half the data is
# never seen. The sampler needs the global rank.

# %%
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kit
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import minidp

LESSON = kit.HERE / "17_multi_node_torchrun.py"
N, BATCH = kit.pick(512, 128), 16
ENV_KEYS = ["RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"]


def train(rank: int, world: int) -> None:
    """What every rank runs (started by torchrun, joined via env:// by minidp.launch)."""
    torch.set_num_threads(1)
    env = {k: int(os.environ[k]) for k in ENV_KEYS}
    x, y = kit.make_data(N)
    data = TensorDataset(torch.arange(N), x, y)
    report: dict = {"env": env, "host": socket.gethostname(), "pid": os.getpid()}
    models = {}
    for name, wrapper in (
        ("minidp", minidp.DistributedDataParallel),
        ("torch", nn.parallel.DistributedDataParallel),
    ):
        sampler = minidp.DistributedSampler(data, seed=3)  # rank and world from the group: global
        loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
        ddp = wrapper(kit.make_model(seed=0))
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        seen = []
        for idx, xb, yb in loader:
            seen += idx.tolist()
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(xb), yb).backward()
            opt.step()
        models[name] = ddp.module
        report["seen"] = seen
    # the pitfall, computed only: the sampler given LOCAL_RANK instead of the global rank
    wrong = minidp.DistributedSampler(data, num_replicas=world, rank=env["LOCAL_RANK"], seed=3)
    report["seen_with_local_rank"] = list(wrong)
    out = Path(os.environ["LESSON17_OUT"])
    torch.save(models, out / f"rank{rank}.pt")
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    kit.say(
        rank,
        " ".join(f"{k}={v}" for k, v in env.items()),
        f"pid {os.getpid()}: trained {len(report['seen'])} samples",
    )
    dist.barrier()


def crash_once(rank: int, world: int) -> int:
    """Part 2: rank 1 dies in the middle of training; how far does rank 0 get?"""
    ddp = minidp.DistributedDataParallel(kit.make_model(seed=0))
    x, y = kit.make_data(64, seed=rank)
    for step, (xb, yb) in enumerate(kit.batches(x, y, 16)):
        if rank == 1 and step == 2:
            kit.say(rank, f"dying at step {step} (a lost GPU, a killed node)")
            os._exit(1)
        try:
            nn.functional.cross_entropy(ddp(xb), yb).backward()
        except minidp.comm.PeerError as exc:
            kit.say(rank, f"step {step}: {type(exc).__name__}: {str(exc)[:110]}...")
            raise
    return step


# %% [markdown]
# Under torchrun this file is a worker: it joins the group and trains (above), then exits.

# %%
if __name__ == "__main__" and minidp.launch.launched_by_torchrun():
    minidp.launch.launch(train, int(os.environ["WORLD_SIZE"]))
    sys.exit(0)

# %% [markdown]
# ## Launch two "machines"

# %%
if __name__ == "__main__":
    kit.title("Lesson 17: two nodes with torchrun --nnodes 2 (c10d rendezvous on 127.0.0.1)")
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(tempfile.mkdtemp(prefix="lesson17-"))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ENV_KEYS + ["MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS"]
    }
    env["LESSON17_OUT"] = str(out)
    t0 = time.perf_counter()
    nodes = []
    for node in range(2):
        cmd = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "lesson17",
            str(LESSON),
        ]  # fmt: skip
        print(
            f"$ torchrun --nnodes 2 --nproc-per-node 2 --node-rank {node} --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:{port} ..."
        )
        log = open(out / f"node{node}.log", "w")
        nodes.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log))
    codes = []
    for proc, log in nodes:
        codes.append(proc.wait(timeout=300))
        log.close()
    print(f"both torchrun agents exited with {codes} after {time.perf_counter() - t0:.1f}s")
    for node in range(2):
        for line in (out / f"node{node}.log").read_text().splitlines():
            if line.startswith("[rank"):
                print(f"  torchrun #{node}: {line}")
    assert codes == [0, 0], (out / "node0.log").read_text()[-3000:] + (
        out / "node1.log"
    ).read_text()[-3000:]
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]
    models = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(4)]
    shutil.rmtree(out)  # read: kept only when a node failed (its log is in the error)

# %% [markdown]
# ## Who is who

# %%
if __name__ == "__main__":
    print(
        f"\n{'RANK':>4} {'GROUP_RANK (node)':>18} {'LOCAL_RANK':>10} {'first samples (global rank)':>30} {'with LOCAL_RANK':>18}"
    )
    for r, rep in enumerate(reports):
        e = rep["env"]
        print(
            f"{r:>4} {e['GROUP_RANK']:>18} {e['LOCAL_RANK']:>10} {str(rep['seen'][:4]):>30} {str(rep['seen_with_local_rank'][:4]):>18}"
        )
    right = set().union(*(set(rep["seen"]) for rep in reports))
    wrong = set().union(*(set(rep["seen_with_local_rank"]) for rep in reports))
    print(
        f"samples covered: with the global rank {len(right)}/{N}; with LOCAL_RANK {len(wrong)}/{N}"
    )

# %% [markdown]
# ## A rank dies: what "fault tolerance" means
# One article says DDP's "built-in fault tolerance lets training continue" when a GPU
# drops out. Measured on 2 rank processes: rank 1 exits in the middle of training. The
# survivor does not continue — its next all-reduce fails at once (the peer's connection
# closed) and the whole job stops. What exists is *restart*: `torchrun --max-restarts N`
# stops every worker and starts them all again from the top of the script, so whatever
# was not in a checkpoint (lesson 15) is recomputed.

# %%
if __name__ == "__main__":
    t0 = time.perf_counter()
    try:
        kit.spawn(crash_once, 2)
        crash = "no error"
    except minidp.launch.WorkerError as exc:
        crash = str(exc)
        print(f"the launcher, {time.perf_counter() - t0:.1f}s later: {crash.splitlines()[0]}")
        for line in crash.splitlines():
            if line.startswith("(also"):
                print("  " + line[:150])

# %% [markdown]
# ## Checks
# * `RANK == GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK`, ranks 0..3 once each, 2 nodes;
# * after training, all 4 ranks hold the same model, minidp's DDP is bit for bit torch's
#   (4 ranks: the ring's chunking matters), and both match one process on the global
#   batch of 4 x 16;
# * the global-rank sampler covers the data; the LOCAL_RANK one covers half of it;
# * the crash: the surviving rank raised too; nothing continued.

# %%
if __name__ == "__main__":
    envs = [rep["env"] for rep in reports]
    kit.check_true(
        "RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK on every rank; 2 nodes, 4 ranks",
        all(e["RANK"] == e["GROUP_RANK"] * e["LOCAL_WORLD_SIZE"] + e["LOCAL_RANK"] for e in envs)
        and sorted(e["RANK"] for e in envs) == [0, 1, 2, 3]
        and {e["GROUP_RANK"] for e in envs} == {0, 1},
    )
    for r in range(1, 4):
        kit.check(
            f"rank {r} == rank 0 after training (minidp DDP)",
            models[r]["minidp"],
            models[0]["minidp"],
        )
    kit.check(
        "minidp DDP vs torch DDP on 2 nodes x 2, every rank",
        [m["minidp"] for m in models],
        [m["torch"] for m in models],
    )
    # one process, the same global batches: the sampler's order, 16 per rank per step
    sampler_orders = [rep["seen"] for rep in reports]
    x, y = kit.make_data(N)
    single = kit.make_model(seed=0)
    steps = [
        sum((order[i : i + BATCH] for order in sampler_orders), [])
        for i in range(0, len(sampler_orders[0]), BATCH)
    ]
    kit.train_single(single, [(x[idx], y[idx]) for idx in steps])
    kit.check(
        "2 nodes x 2 ranks vs one process on the same global batches",
        models[0]["minidp"],
        single,
        exact=False,
        rtol=1e-4,
        atol=1e-5,
    )
    kit.check_true("DistributedSampler with the global rank covers every sample", len(right) == N)
    kit.check_true(
        "with LOCAL_RANK, both nodes read the same samples: half the data unseen",
        len(wrong) == N // 2,
        f"{len(wrong)}/{N}",
    )
    kit.check_true(
        "a dead rank stops the job: rank 1's exit is the root cause, rank 0 failed with PeerError",
        crash.startswith("spawn: rank 1 exited with code 1") and "rank 0 raised PeerError" in crash,
    )
    kit.done()
