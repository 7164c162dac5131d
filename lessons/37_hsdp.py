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
#   down its column** — so what crosses nodes is each rank's 1/S shard of the gradient, in
#   an all-reduce over the R replicas: a ring sends 2(R-1)/R of its input per rank, so
#   2(R-1)/R · 1/S of the gradient per rank per step (1/S at R = 2, nearly 2/S for many);
# * memory per rank is FSDP's over **S** ranks (the row), not over all S x R: the price.
#
# The same idea appears as **MiCS** (Zhang et al., 2022: partition the model states
# within a small group, replicate across groups, sync gradients hierarchically), as FSDP1's
# `FullyShardedDataParallel(..., sharding_strategy=ShardingStrategy.HYBRID_SHARD)` (and
# `_HYBRID_SHARD_ZERO2`, which also keeps the weights gathered from forward to backward),
# and, for the weights only, as **ZeRO++'s hpZ** (Wang et al., 2023: a second, node-local
# shard of the weights so that backward's all-gather stays inside the node) — FSDP2's
# `fully_shard(..., reshard_after_forward=8)`: after forward each unit keeps a shard over
# 8 ranks (a node) instead of all of them, and backward gathers within it
# (`minidp/fsdp/post_forward.py` does the same).
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
from minidp.fsdp.dtensor import local
from minidp.tools.planner import plan
from minidp.tools.planner.memory import measure

R, S = 2, 2  # replicas (nodes) x shard size (GPUs per node)
NAMES = ("replicate", "shard")
VOCAB, DIM, STEPS = 64, kit.pick(64, 32), kit.pick(4, 2)
WIDE = 384  # section 3's 4 x 1 model: each unit's gradient 591 KB, above 256 KiB
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


class Wide(nn.Module):
    """Two wide layers, each an FSDP unit: gradients big enough for minidp's ring all-reduce
    (``minidp.comm``: from 3 ranks, tensors up to 256 KiB take one direct exchange instead)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(WIDE, WIDE) for _ in range(2))

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x))
        return x


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


def wide_replicas(rank: int) -> dict:
    """HSDP on a (4, 1) mesh — R = 4 replicas of a 1-rank shard — the Wide model, two steps:
    the bytes the column group (the all-reduce) sent in the second."""
    mesh = minidp.init_device_mesh("cpu", (R * S, 1), mesh_dim_names=NAMES)
    log = trace.MessageLog()
    tapped = DeviceMesh(mesh.mesh, NAMES, [
        trace.tap(mesh.get_group("replicate"), log, copy=False), mesh.get_group("shard")])  # fmt: skip
    torch.manual_seed(0)
    model = shard_all(Wide(), minidp.fully_shard, mesh=tapped)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(8, WIDE, generator=torch.Generator().manual_seed(rank))
    for _ in range(2):  # the second step is measured
        since = len(log.messages)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    sent = sum(m.nbytes for m in log.messages[since:] if m.kind == "send")
    return {"sent": sent, "messages": sum(m.kind == "send" for m in log.messages[since:])}


def fsdp2_accumulate(rank: int, world: int) -> dict:
    """FSDP2 HSDP, one step of two micro-batches, the first with set_requires_all_reduce(False):
    the all-reduces (dist.all_reduce, what FSDP2 calls for the replicas) in each."""
    if kit.why_no_fsdp2():
        return {}
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = shard_all(
        TinyLM(), fully_shard, mesh=init_device_mesh("cpu", (R, S), mesh_dim_names=NAMES)
    )
    calls, original = [], dist.all_reduce
    g = torch.Generator().manual_seed(200 + rank)
    per_micro = []
    dist.all_reduce = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        for last in (False, True):
            model.set_requires_all_reduce(last)  # the micro-batches before the last: no
            before = len(calls)
            tokens = torch.randint(0, VOCAB, (4, 17), generator=g)
            F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
            per_micro.append(len(calls) - before)
    finally:
        dist.all_reduce = original
    return {"all-reduces": per_micro, "units": 1 + len(model.blocks)}


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
            row_only = traffic(models["fsdp row"]).sent_bytes
        for name, model in models.items():
            step(model, opts[name], tokens)
    to_global = {"row": lambda r: row[r], "column": lambda r: col[r], "world": int}
    links = {k: sent_by_node(logs[k], to_global[k], since[k], rank) for k in logs}
    out = {
        "row": row, "column": col, "links": links,
        "counted": {n: traffic(models[n]).sent_bytes - b for n, b in counted.items()},
        "fsdp row sent": traffic(models["fsdp row"]).sent_bytes - row_only,
        "wide": wide_replicas(rank), "accumulate": fsdp2_accumulate(rank, world),
        "memory": {n: measure(models[n], opts[n]) for n in ("hsdp", "fsdp 4", "fsdp row")},
        "hsdp": {n: p.detach() for n, p in full_state_dict(models["hsdp"]).items()},
        "shard": [local(p).detach() for p in models["hsdp"].parameters()],  # this rank's rows
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
    from torch.distributed.fsdp import ShardingStrategy

    kit.check_true(
        "FSDP1's names for HSDP: ShardingStrategy.HYBRID_SHARD and _HYBRID_SHARD_ZERO2",
        {"HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"} <= set(ShardingStrategy.__members__),
    )
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
    row_sent = [sum(r["links"]["row"].values()) for r in res]
    kit.check_true(
        "HSDP's row group carries exactly what FSDP over the row alone sends (the same "
        "all-gathers and reduce-scatters, byte for byte, every rank)",
        row_sent == [r["fsdp row sent"] for r in res],
        f"{row_sent} vs {[r['fsdp row sent'] for r in res]}",
    )
    fsdp_cross = [r["by node"]["fsdp 4"]["other node"] for r in res]
    kit.check_true(
        "FSDP over 4: ranks 0 and 2 send (almost) all their all-gather and reduce-scatter "
        "bytes to the other node",
        all(fsdp_cross[r] > 0.95 * res[r]["counted"]["fsdp 4"] for r in (0, 2)),
        f"bytes to the other node per rank {fsdp_cross}",
    )  # fmt: skip

# %% [markdown]
# What crosses nodes under HSDP is each rank's gradient *shard*, in an all-reduce over the
# R replicas. A ring all-reduce cuts its input in R chunks and runs R-1 steps of
# reduce-scatter, then R-1 of all-gather, each sending one chunk: 2(R-1)/R of the input per
# rank. The input is the padded shard, `ceil(rows / S) x row` elements of every parameter, 4
# bytes each — 1/S of the gradient — so each rank sends 2(R-1)/R · 1/S of the gradient
# across nodes: 1/S at R = 2 (the measurement below), and towards 2/S as R grows. A second
# run checks R = 4: the same ranks as a (4, 1) mesh (4 replicas of a 1-rank shard, every
# column message crossing nodes) with the `Wide` model, whose unit gradients are above the
# 256 KiB up to which minidp's all-reduce sends a small tensor in one direct exchange from 3 ranks
# instead ((R-1) times its bytes: the ring's at R = 2, twice it at R = 4). Both must match
# the formula up to the collectives' small headers.

# %%
if __name__ == "__main__":
    torch.manual_seed(0)
    params = list(TinyLM().parameters())
    numel = sum(p.numel() for p in params)  # global: an unsharded TinyLM
    shard_bytes = 4 * sum(math.ceil(p.shape[0] / S) * p[0].numel() for p in params)  # global
    hsdp_cross = [r["by node"]["hsdp"]["other node"] for r in res]
    print(f"  gradient {4 * numel:,} bytes; its padded 1/{S} shard {shard_bytes:,} bytes; "
          f"HSDP sent to the other node per rank {hsdp_cross}")  # fmt: skip
    kit.check_true(
        f"R = 2: each rank sends 2(R-1)/R x 1/S = 1/S of the gradient across nodes "
        f"({shard_bytes:,} B + headers)",
        all(shard_bytes <= b <= 1.02 * shard_bytes for b in hsdp_cross), f"{hsdp_cross}",
    )  # fmt: skip
    r4 = R * S  # the (4, 1) run: 4 replicas, shard size 1
    wide = 4 * sum(p.numel() for p in Wide().parameters())  # global: all of it (S = 1)
    ring = 2 * (r4 - 1) / r4 * wide
    wide_sent = [r["wide"]["sent"] for r in res]
    print(f"  R = {r4}, S = 1: gradient {wide:,} B; 2(R-1)/R of it {ring:,.0f} B; sent down the "
          f"column per rank {wide_sent} ({wide_sent[0] / wide:.3f}x the gradient)")  # fmt: skip
    kit.check_true(
        f"R = {r4}: each rank sends 2(R-1)/R = {2 * (r4 - 1) / r4} x its shard across nodes "
        "(+ headers), not 1/S",
        all(ring <= b <= 1.02 * ring for b in wide_sent),
        f"{wide_sent} vs {ring:,.0f}",
    )
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
# Gradient accumulation under HSDP has a middle way between syncing every micro-batch and
# `set_requires_gradient_sync(False)` (which keeps the whole unsharded gradient, lesson 32):
# FSDP2's `set_requires_all_reduce(False)` on the micro-batches before the last still
# reduce-scatters inside the node — each rank keeps only its shard's sum — but skips the
# all-reduce across nodes until the last one. (minidp's `fully_shard` does not have it.)
# FSDP2, counted at `dist.all_reduce`:

# %%
if __name__ == "__main__":
    acc = [r["accumulate"] for r in res]
    if not acc[0]:
        print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")
    else:
        print(f"  all-reduces per micro-batch, set_requires_all_reduce(False) then (True): "
              f"{[a['all-reduces'] for a in acc]} ({acc[0]['units']} units)")  # fmt: skip
        kit.check_true(
            "set_requires_all_reduce(False): no all-reduce across nodes; the last micro-batch "
            "all-reduces every unit's shard once",
            all(a["all-reduces"] == [0, a["units"]] for a in acc),
        )

# %% [markdown]
# ## 4. Memory: FSDP's over S ranks, not over S x R
# The model states per rank (weights, gradients, AdamW's state) read from the tensors
# (`minidp.tools.planner.memory.measure`): HSDP holds exactly what FSDP within one node holds — and
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
# times FSDP-over-64's memory for the model states. With one node per shard group (S = 8)
# they alone exceed 80 GiB. With S = 16 the model states and the activations (4096-token
# sequences, every layer checkpointed) fit — but a step also holds the units FSDP gathers
# (lesson 34): the root's embedding and head, 2.10 B parameters = 3.9 GiB in bf16, from
# forward to backward; two gathered layers of 1.6 GiB; and in backward the unsharded
# gradients and their reduce-scatter copies. The planner counts them (`units`): S = 16 is
# necessary, not sufficient. 32-GPU shard groups fit (their all-gathers cross more nodes),
# as would the embedding and the head as units of their own (freed between uses).

# %%
if __name__ == "__main__":
    from minidp.tools.planner import plan_cli
    from minidp.tools.planner.units import units

    psi, u = plan.MODELS["llama-3-70b"], units("llama-3-70b", "bf16-mixed")
    totals = {s: plan.plan(psi, 64, 80, shard_size=s)[-1].total / plan.GIB for s in (8, 16, 32)}
    print("  HSDP model states per GPU by shard size: "
          + ", ".join(f"S={s}: {t:.1f} GiB" for s, t in totals.items())
          + f"; FSDP's units at their peak: {u.peak / plan.GIB:.1f} GiB")  # fmt: skip
    argv = "--model llama-3-70b --gpus 64 --seq 4096 --checkpointing full --shard-size"
    hsdp = {}
    for s in (16, 32):
        rows, text = plan_cli.planned([*argv.split(), str(s)])
        if s == 32:  # the same table but for its last row
            text = "\n".join(t for t in text.splitlines() if t.startswith(("stage", "HSDP")))
        print(f"\n$ python -m minidp memory {argv} {s}\n{text}")
        hsdp[s] = rows[-1]
    kit.check_true(
        "S = 16 is necessary, not sufficient: the model states and activations fit in 80 GiB, "
        "the gathered units do not; S = 32 fits",
        hsdp[16].total - hsdp[16].units <= 80 * plan.GIB < hsdp[16].total and hsdp[32].fits,
        f"S = 16: {(hsdp[16].total - hsdp[16].units) / plan.GIB:.1f} GiB + units "
        f"{hsdp[16].units / plan.GIB:.1f} = {hsdp[16].total / plan.GIB:.1f} GiB",
    )
    kit.done()
    print(
        "Exercise: HSDP's two-step gradient reduction yourself — python -m minidp exercise check hsdp_reduce"
    )
