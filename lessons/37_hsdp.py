# %% [markdown]
# # Lesson 37 — HSDP: shard within a node, replicate across nodes
#
# Run: `python lessons/37_hsdp.py`
#
# FSDP over every GPU (lesson 21) gives each rank the least memory, but every all-gather
# and every reduce-scatter then runs over *all* ranks — and a ring over two nodes crosses
# the slow link between them twice. The all-gathers sit on the critical path: a unit
# cannot compute until its weights have arrived. Inside a node GPUs talk over NVLink
# (hundreds of GB/s); between nodes over InfiniBand or Ethernet, several times slower.
#
# **HSDP** (hybrid sharded data parallel) lays the ranks out as a grid — a 2-D
# `DeviceMesh` of (replicate, shard) — and uses each direction for one job:
#
# ```
#                     "shard" dim: a row = one node (fast links)
#                     ──────────────────────────────────────────►
#          node 0:   [ rank 0: rows A ] ◄═ all-gather / reduce-scatter ═► [ rank 1: rows B ]
# "replicate"             ▲                                                   ▲
#  dim: a column          │ all-reduce of the A-gradient                      │ ... of B's
#  (slow link,            │ (1/S of the gradient,                             │
#  once per step)         ▼  after the reduce-scatter)                        ▼
#          node 1:   [ rank 2: rows A ] ◄═ all-gather / reduce-scatter ═► [ rank 3: rows B ]
# ```
#
# * forward and backward all-gather the weights **within the row** (the node);
# * backward reduce-scatters the gradients within the row, then **all-reduces each shard
#   down its column** — so only 1/S of the gradient crosses nodes, per rank, per step;
# * memory per rank is FSDP's over **S** ranks (the row), not over all S x R: the price.
#
# The same idea appears as **MiCS** (Zhang et al., 2022: partition the model states
# within a small group, replicate across groups, sync gradients hierarchically) and, for
# the weights only, as **ZeRO++'s hpZ** (Wang et al., 2023: a second, node-local shard of
# the weights so that backward's all-gather stays inside the node).
#
# Here 4 rank processes play 2 nodes of 2 GPUs: minidp's HSDP against FSDP2's, then the
# bytes sent within and across nodes (FSDP over 4 vs HSDP 2 x 2), then memory per rank.

# %%
import math
import warnings

import kit
import torch
import torch.nn.functional as F
from torch import nn

import minidp
from minidp import trace
from minidp.comm.mesh import DeviceMesh
from minidp.fsdp import full_state_dict, traffic
from minidp.zero import plan
from minidp.zero.memory import measure

R, S = 2, 2  # replicas (nodes) x shard size (GPUs per node)
NAMES = ("replicate", "shard")
VOCAB, DIM, STEPS = 64, kit.pick(64, 32), kit.pick(4, 2)
warnings.filterwarnings("ignore", message="FSDP2-wrapped module")  # a view output: harmless


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def shard_all(model, fully_shard, **kw):
    for block in model.blocks:
        fully_shard(block, **kw)  # one unit per block, then the root
    return fully_shard(model, **kw)


def step(model, opt, tokens):
    opt.zero_grad()
    F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
    opt.step()


# %% [markdown]
# ## 1. One run, four models on every rank
# Each rank builds the same seeded model four times — minidp HSDP and FSDP2 HSDP on (2, 2)
# meshes, minidp FSDP over all 4 ranks and over its row only (2 ranks) — and trains them
# on its own data. To count bytes *per link*, the groups are wrapped by `trace.tap` (an
# observer that logs every send with its peer and size); each peer maps to a global rank,
# so to a node (`rank // S`). The last step's sends must add up to `fsdp.traffic`.


# %%
def sent_by_node(log: trace.MessageLog, to_global, since: int, me: int) -> dict:
    """Bytes this rank sent to its own node / the other node, in log messages [since:]."""
    out = {"own node": 0, "other node": 0}
    for m in log.messages[since:]:
        if m.kind == "send":
            out["own node" if to_global(m.dst) // S == me // S else "other node"] += m.nbytes
    return out


def hsdp_lesson(rank: int, world: int) -> dict:
    mesh = minidp.init_device_mesh("cpu", (R, S), mesh_dim_names=NAMES)
    row, col = mesh.mesh[rank // S].tolist(), mesh.mesh[:, rank % S].tolist()
    logs = {"row": trace.MessageLog(), "column": trace.MessageLog(), "world": trace.MessageLog()}
    tapped = DeviceMesh(mesh.mesh, NAMES, [  # the same groups, every send logged
        trace.tap(mesh.get_group("replicate"), logs["column"], copy=False),
        trace.tap(mesh.get_group("shard"), logs["row"], copy=False)])  # fmt: skip
    world_group = trace.tap(minidp.comm.group.resolve(), logs["world"], copy=False)
    torch.manual_seed(0)  # the same weights everywhere: FSDP broadcasts nothing
    reference = TinyLM().state_dict()
    models = {name: TinyLM() for name in ("hsdp", "fsdp 4", "fsdp row", "fsdp2 hsdp")}
    for m in models.values():
        m.load_state_dict(reference)
    shard_all(models["hsdp"], minidp.fully_shard, mesh=tapped)
    shard_all(models["fsdp 4"], minidp.fully_shard, process_group=world_group)
    shard_all(models["fsdp row"], minidp.fully_shard, mesh=mesh["shard"])
    if kit.why_no_fsdp2():
        del models["fsdp2 hsdp"]
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        torch_mesh = init_device_mesh("cpu", (R, S), mesh_dim_names=NAMES)
        shard_all(models["fsdp2 hsdp"], fully_shard, mesh=torch_mesh)
    opts = {n: torch.optim.AdamW(m.parameters(), lr=1e-2) for n, m in models.items()}
    g = torch.Generator().manual_seed(100 + rank)  # every rank its own data
    for i in range(STEPS):
        tokens = torch.randint(0, VOCAB, (4, 17), generator=g)
        if i == STEPS - 1:  # measure the last step
            since = {k: len(log.messages) for k, log in logs.items()}
            counted = {n: traffic(models[n]).sent_bytes for n in ("hsdp", "fsdp 4")}
        for name, model in models.items():
            step(model, opts[name], tokens)
    to_global = {"row": lambda r: row[r], "column": lambda r: col[r], "world": int}
    links = {k: sent_by_node(logs[k], to_global[k], since[k], rank) for k in logs}
    out = {
        "row": row, "column": col, "links": links,
        "counted": {n: traffic(models[n]).sent_bytes - b for n, b in counted.items()},
        "memory": {n: measure(models[n], opts[n]) for n in ("hsdp", "fsdp 4", "fsdp row")},
        "hsdp": {n: p.detach() for n, p in full_state_dict(models["hsdp"]).items()},
        "shard": [p.detach() for p in models["hsdp"].parameters()],
    }  # fmt: skip
    if "fsdp2 hsdp" in models:
        theirs = models["fsdp2 hsdp"]
        out["fsdp2"] = {n: p.full_tensor().detach() for n, p in theirs.named_parameters()}
        out["fsdp2 shard"] = [p.to_local().detach() for p in theirs.parameters()]
    return out


if __name__ == "__main__":
    kit.title("Lesson 37: HSDP — shard within a node, replicate across nodes")
    res = kit.spawn(hsdp_lesson, R * S)
    for rank, r in enumerate(res):
        print(f"  rank {rank}: shards with {r['row']} (its node), replicates with {r['column']}")
    kit.check_true(
        "the mesh's rows are the shard groups, its columns the replicate groups",
        [r["row"] for r in res] == [[0, 1], [0, 1], [2, 3], [2, 3]]
        and [r["column"] for r in res] == [[0, 2], [1, 3], [0, 2], [1, 3]],
    )

# %% [markdown]
# ## 2. Against PyTorch: FSDP2's HSDP
# `torch.distributed.fsdp.fully_shard(model, mesh=init_device_mesh("cpu", (2, 2)))`: the
# same mesh layout, the same reduce-scatter then all-reduce, the same divide factors. After
# the last step every full weight and every rank's shard are FSDP2's, bit for bit.

# %%
if __name__ == "__main__":
    if "fsdp2" not in res[0]:
        print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")
    else:
        kit.check("every rank's full weights: minidp HSDP = FSDP2 HSDP",
                  [r["hsdp"] for r in res], [r["fsdp2"] for r in res])  # fmt: skip
        kit.check("every rank's own shard: minidp HSDP = FSDP2 HSDP (to_local())",
                  [r["shard"] for r in res], [r["fsdp2 shard"] for r in res])  # fmt: skip

# %% [markdown]
# ## 3. Bytes per link, per rank, per step
# Sent by each rank in one training step (two all-gathers of the blocks, one of the root,
# one reduce-scatter; HSDP adds the all-reduce down the column). "Own node" travels over
# the fast links, "other node" over the slow one.

# %%
if __name__ == "__main__":
    print(f"\n  {'':<28}{'to own node':>13}{'to other node':>15}{'counted total':>15}")
    for name in ("fsdp 4", "hsdp"):
        for rank, r in enumerate(res):
            groups = ("row", "column") if name == "hsdp" else ("world",)  # HSDP: both groups
            links = {k: sum(r["links"][g][k] for g in groups) for k in ("own node", "other node")}
            label = "FSDP over 4 ranks" if name == "fsdp 4" else "HSDP 2 x 2"
            print(f"  {label:<19} rank {rank}:{links['own node']:>13,}{links['other node']:>15,}"
                  f"{r['counted'][name]:>15,}")  # fmt: skip
            r.setdefault("by node", {})[name] = links
    kit.check_true(
        "the tapped messages add up to FSDP's own byte counter (every rank, both layouts)",
        all(sum(r["by node"][n].values()) == r["counted"][n] for r in res for n in r["counted"]),
    )
    kit.check_true(
        "HSDP: the all-gathers and reduce-scatters (row group) never leave the node, the "
        "all-reduce (column group) always does",
        all(r["links"]["row"]["other node"] == 0 for r in res)
        and all(r["links"]["column"]["own node"] == 0 for r in res),
    )
    fsdp_cross = [r["by node"]["fsdp 4"]["other node"] for r in res]
    kit.check_true(
        "FSDP over 4: ranks 0 and 2 send (almost) all their all-gather and reduce-scatter "
        "bytes to the other node",
        all(fsdp_cross[r] > 0.95 * res[r]["counted"]["fsdp 4"] for r in (0, 2)),
        f"bytes to the other node per rank {fsdp_cross}",
    )  # fmt: skip

# %% [markdown]
# What crosses nodes under HSDP is each rank's gradient *shard*: a ring all-reduce over
# R = 2 sends 2(R-1)/R = 1 times its bytes. From the shapes alone, the padded shard is
# `ceil(rows / S) x row` elements of every parameter, 4 bytes each: 1/S of the gradient.
# The measurement must match it up to the collectives' small headers.

# %%
if __name__ == "__main__":
    torch.manual_seed(0)
    params = list(TinyLM().parameters())
    numel = sum(p.numel() for p in params)
    shard_bytes = 4 * sum(math.ceil(p.shape[0] / S) * (p.numel() // p.shape[0]) for p in params)
    hsdp_cross = [r["by node"]["hsdp"]["other node"] for r in res]
    print(f"  gradient {4 * numel:,} bytes; its padded 1/{S} shard {shard_bytes:,} bytes; "
          f"HSDP sent to the other node per rank {hsdp_cross}")  # fmt: skip
    kit.check_true(
        f"HSDP: each rank sends 1/S of the gradient across nodes ({shard_bytes:,} B + headers)",
        all(shard_bytes <= b <= 1.02 * shard_bytes for b in hsdp_cross), f"{hsdp_cross}",
    )  # fmt: skip
    kit.check_true(
        "summed over ranks, HSDP sends fewer bytes across nodes than FSDP over 4",
        sum(hsdp_cross) < sum(fsdp_cross),
        f"{sum(hsdp_cross):,} vs {sum(fsdp_cross):,}: {sum(fsdp_cross) / sum(hsdp_cross):.2f}x",
    )  # fmt: skip

# %% [markdown]
# The ring that FSDP over 4 ranks uses sends to the left neighbour, 0 → 3 → 2 → 1 → 0: two
# of its four hops cross nodes, so ranks 0 and 2 send everything over the slow link and
# every collective — the all-gathers a unit waits for included — runs at its speed. HSDP
# sends only the gradient shards across, once per step, after the reduce-scatter: work
# that overlaps backward. At 2 x 2 it even sends fewer bytes in total, because each
# all-gather has 2 ranks instead of 4 ((S-1)/S of the weights instead of 3/4).
#
# ## 4. Memory: FSDP's over S ranks, not over S x R
# The model states per rank (weights, gradients, AdamW's state) read from the tensors
# (`minidp.zero.memory.measure`): HSDP holds exactly what FSDP within one node holds — and
# about twice FSDP over all 4 ranks. The planner's HSDP row (`--shard-size`) is that.

# %%
if __name__ == "__main__":
    for name in ("fsdp 4", "fsdp row", "hsdp"):
        u = res[0]["memory"][name]
        print(f"  rank 0, {name:<9}: weights {u.params:>7,}  grads {u.grads:>7,}  "
              f"optimizer {u.optimizer:>7,}  total {u.total:>7,} bytes")  # fmt: skip
    kit.check_true(
        "every rank: HSDP's model states = FSDP over its row (2 ranks), byte for byte",
        all(r["memory"]["hsdp"] == r["memory"]["fsdp row"] for r in res),
    )
    ratio = [r["memory"]["hsdp"].total / r["memory"]["fsdp 4"].total for r in res]
    kit.check_true(
        "... and about R = 2 times FSDP over all 4 ranks (padding aside)",
        all(1.9 < x < 2.1 for x in ratio),
        f"{[round(x, 3) for x in ratio]}",
    )
    row = plan.plan(numel, R * S, 80, "adamw", "fp32", shard_size=S)[-1]
    got = res[0]["memory"]["hsdp"].total
    kit.check_true(
        "the planner's HSDP row is the measured bytes (within padding)",
        abs(got - row.total) < 0.01 * row.total,
        f"{got:,} vs {row.total:,.0f}",
    )

# %% [markdown]
# ## 5. At scale: the shard group must still hold the model
# Llama-3-70B on 8 nodes of 8 80-GiB GPUs, AdamW, 16 bytes per parameter: HSDP needs 64/S
# times FSDP-over-64's memory. With one node per shard group (S = 8) the model states
# alone exceed 80 GiB, so the shard group must span 2 nodes (its all-gathers cross a slow
# link again, over 16 ranks instead of 64). The planner, activations estimated for
# 4096-token sequences with every layer checkpointed:

# %%
if __name__ == "__main__":
    from minidp.zero import plan_cli

    psi = plan.MODELS["llama-3-70b"]
    totals = {s: plan.plan(psi, 64, 80, shard_size=s)[-1].total / plan.GIB for s in (8, 16, 32)}
    print("  HSDP model states per GPU by shard size: "
          + ", ".join(f"S={s}: {t:.1f} GiB" for s, t in totals.items()))  # fmt: skip
    argv = "--model llama-3-70b --gpus 64 --shard-size 16 --seq 4096 --checkpointing full"
    print(f"\n$ python -m minidp memory {argv}")
    plan_cli.main(argv.split())
    kit.done()
    print(
        "Exercise: HSDP's two-step gradient reduction yourself — python -m minidp exercise check hsdp_reduce"
    )
