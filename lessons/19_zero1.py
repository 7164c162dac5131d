# %% [markdown]
# # Lesson 19 — ZeRO-1: shard the optimizer state, keep everything else
#
# Run: `python lessons/19_zero1.py`
#
# Every DDP rank computes the *same* AdamW update from the same averaged gradient, and
# keeps the same two moments for every parameter (lesson 18: half of the 16 bytes per
# parameter). ZeRO-1 removes that redundancy: rank r keeps the optimizer — and its
# state — for only the parameters it *owns*, steps only those, then sends each updated
# parameter from its owner to everyone, so every replica is whole for the next forward.
#
# Who owns what is torch's rule (sorted by size, largest first, each to the rank with the
# fewest elements so far); with the same owners, the same state lives on the same rank
# as in `torch.distributed.optim.ZeroRedundancyOptimizer`, and the bits can be compared.
# Owning *whole* parameters is torch's choice, not the paper's: DeepSpeed's ZeRO-1 flattens
# all parameters into one buffer and cuts it into N equal pieces (a parameter may straddle
# two ranks), so its ranks are balanced to the element; torch's are only as balanced as
# the biggest tensor allows.
#
# **What it costs on the wire.** Following torch — DDP's all-reduce of every gradient,
# then one broadcast of each parameter from its owner — ZeRO-1 sends **1.5× DDP's bytes**
# (the all-reduce's 2(N-1)/N·4Ψ plus the broadcasts' (N-1)/N·4Ψ, on average per rank;
# an owner of big tensors sends more). The ZeRO paper's "ZeRO-1 costs what DDP costs"
# (2Ψ) assumes a reduce-scatter of the gradients and an all-gather of the updated
# parameters instead — which is ZeRO-2's step (lesson 20: 1.0×). Measured below.
#
# Ranks are processes (torch's DDP and ZeRO need a real process group); the traffic is
# counted in a thread world (`minidp.tools.planner.stages.step_traffic`).

# %%
import copy
import inspect

import kit
import torch
from torch import nn

import minidp
from minidp.launch import run_threads
from minidp.textbook.zero import TextbookZero1
from minidp.tools.planner.memory import optimizer_tensors, storage_bytes
from minidp.tools.planner.stages import step_traffic
from minidp.zero import ZeroRedundancyOptimizer
from minidp.zero.partition import partition_parameters

WORLD, STEPS, WIDTH = 2, kit.pick(5, 3), kit.pick(64, 32)


def make_model(width: int = WIDTH) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(width, 2 * width),
        nn.Tanh(),
        nn.Linear(2 * width, width),
        nn.Tanh(),
        nn.Linear(width, 4),
    )


def train(rank: int, world: int) -> dict:
    """torch DDP + torch ZeRO, minidp DDP + minidp ZeRO, DDP + textbook ZeRO: same data."""
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZero

    base = make_model()
    ref = nn.parallel.DistributedDataParallel(copy.deepcopy(base))
    ours = minidp.DistributedDataParallel(copy.deepcopy(base))
    plain = copy.deepcopy(base)  # textbook: it averages the gradients itself
    t_opt = TorchZero(ref.parameters(), torch.optim.AdamW, lr=1e-2)
    opt = ZeroRedundancyOptimizer(ours.parameters(), torch.optim.AdamW, lr=1e-2)
    book = TextbookZero1(plain.parameters(), torch.optim.AdamW, lr=1e-2)
    g = torch.Generator().manual_seed(rank)
    equal, book_equal = [], []
    for _ in range(STEPS):
        x, y = torch.randn(16, WIDTH, generator=g), torch.randint(0, 4, (16,), generator=g)
        for model, o in ((ref, t_opt), (ours, opt), (plain, book)):
            o.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            o.step()
        equal.append(all(torch.equal(a, b) for a, b in zip(ours.parameters(), ref.parameters())))
        book_equal.append(
            all(torch.equal(a, b) for a, b in zip(plain.parameters(), ref.parameters()))
        )
    index = {p: i for i, p in enumerate(ours.parameters())}
    t_index = {p: i for i, p in enumerate(ref.parameters())}
    opt.consolidate_state_dict(to=0)
    t_opt.consolidate_state_dict(to=0)
    return {
        "equal": equal,
        "textbook_equal": book_equal,
        "owned": [index[p] for p in opt.owned_parameters()],
        "torch_owned": [t_index[p] for grp in t_opt.optim.param_groups for p in grp["params"]],
        "state_bytes": storage_bytes(optimizer_tensors(opt.optim)),
        "torch_state_bytes": storage_bytes(optimizer_tensors(t_opt.optim)),
        "params": [p.detach().clone() for p in ours.parameters()],
        "state": opt.state_dict() if rank == 0 else None,
        "torch_state": t_opt.state_dict() if rank == 0 else None,
    }


def bytes_sent(rank: int, world: int) -> dict:
    """Bytes this rank sends in one step of DDP and of ZeRO-1 (all-reduce + broadcasts).

    Width 128 (66k parameters) in every mode: each collective also sends a small
    cross-rank header, which a tiny model would let weigh in the ratio."""
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(16, 128, generator=g), torch.randint(0, 4, (16,), generator=g)
    loss = nn.functional.cross_entropy
    return {
        s: step_traffic(s, make_model(128), x, y, loss, torch.optim.AdamW) for s in ("ddp", "zero1")
    }


# %% [markdown]
# ## 1. Who owns what
# The rule, on this model's parameters (sizes in elements):

# %%
if __name__ == "__main__":
    kit.title("Lesson 19: ZeRO-1 — the optimizer state, sharded")
    params = list(make_model().parameters())
    owners = partition_parameters([{"params": params}], WORLD)
    for r in range(WORLD):
        mine = owners[r][0]["params"]
        sizes = [p.numel() for p in mine]
        print(f"rank {r} owns {len(mine)} tensors, {sum(sizes)} elements: {sizes}")

# %% [markdown]
# ## 2. The step, in the textbook version
# All-reduce the gradients (DDP does this in the faithful version), let the owner step,
# broadcast from the owner:

# %%
if __name__ == "__main__":
    print(inspect.getsource(TextbookZero1.step))
    results = kit.spawn(train, WORLD)
    for r, res in enumerate(results):
        print(
            f"rank {r}: AdamW state {res['state_bytes']} B here (torch's ZeRO: {res['torch_state_bytes']} B)"
        )
    full = 8 * sum(p.numel() for p in params)
    print(f"unsharded AdamW moments would be {full} B on every rank")

# %% [markdown]
# ## 3. The bytes on the wire, against DDP's
# One step of each on 2 and 4 ranks (thread worlds), bytes sent per rank:

# %%
if __name__ == "__main__":
    sent = {w: run_threads(bytes_sent, w) for w in (2, 4)}
    ratio = {}
    for w, ranks in sent.items():
        ddp_b, zero_b = [r["ddp"] for r in ranks], [r["zero1"] for r in ranks]
        ratio[w] = sum(zero_b) / sum(ddp_b)
        print(f"  W={w}: DDP {ddp_b} B, ZeRO-1 {zero_b} B per rank: "
              f"{ratio[w]:.2f}x DDP on average, {max(zero_b) / max(ddp_b):.2f}x for the busiest rank")  # fmt: skip

# %% [markdown]
# ## Checks
# After every step, every parameter equals torch's ZeRO + DDP bit for bit (the gradient is
# DDP's, the owner runs the same AdamW on the same tensors, a broadcast copies bits); each
# rank owns what torch's does and holds the same bytes of state; the consolidated state
# dict is torch's.

# %%
if __name__ == "__main__":
    for r, res in enumerate(results):
        kit.check_true(
            f"rank {r}: minidp ZeRO-1 == torch ZeRO + DDP after every step (torch.equal)",
            all(res["equal"]),
            str(res["equal"]),
        )
        kit.check_true(
            f"rank {r}: textbook ZeRO-1 == torch after every step (torch.equal)",
            all(res["textbook_equal"]),
            str(res["textbook_equal"]),
        )
        kit.check_true(
            f"rank {r} owns the same parameters as torch's",
            res["owned"] == res["torch_owned"],
            str(res["owned"]),
        )
        kit.check_true(
            f"rank {r} holds torch's state bytes", res["state_bytes"] == res["torch_state_bytes"]
        )
    kit.check("replicas identical across ranks", results[0]["params"], results[1]["params"])
    for w, r in ratio.items():  # measured both ways; 2%: each broadcast adds a small header
        kit.check_true(
            f"W={w}: ZeRO-1 (all-reduce + broadcasts) sends 1.5x DDP's bytes, not the same",
            abs(r - 1.5) <= 0.02 * 1.5,
            f"{r:.3f}x",
        )
    ours, theirs = results[0]["state"], results[0]["torch_state"]
    kit.check(
        "consolidated state dict vs torch's",
        [
            ours["state"][i][k]
            for i in sorted(ours["state"])
            for k in ("exp_avg", "exp_avg_sq", "step")
        ],
        [
            theirs["state"][i][k]
            for i in sorted(theirs["state"])
            for k in ("exp_avg", "exp_avg_sq", "step")
        ],
    )
    print("Exercise: write ZeRO-1's step yourself — python -m minidp exercise check zero1_step")
    kit.done()
    print(
        "Exercise: ZeroRedundancyOptimizer's partition yourself — python -m minidp exercise check zero1_partition"
    )
