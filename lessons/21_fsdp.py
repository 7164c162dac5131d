# %% [markdown]
# # Lesson 21 — FSDP (ZeRO-3): shard everything, gather one unit at a time, prefetch
#
# Run: `python lessons/21_fsdp.py`
# Picture: `diagrams/fsdp_timeline.png` (`python -m minidp diagrams --only fsdp`)
#
# DDP keeps a whole replica on every rank. FSDP keeps **1/world of every parameter** (and
# so of every gradient and optimizer state) and rebuilds the full weights only when they
# are needed: `fully_shard` each transformer block (a *unit*), then the whole model (the
# root). Per unit and step:
#
# * **all-gather** its shards before its forward; **free** the full weights after it;
# * **all-gather** again when backward reaches the unit; **reduce-scatter** its gradients,
#   so each rank gets the average of the rows it owns — and steps only those.
#
# Communication per step: 2 all-gathers + 1 reduce-scatter of the parameters, 1.5x DDP's
# all-reduce. `reshard_after_forward=False` keeps each unit gathered from its forward to
# its backward: no second all-gather, so DDP's bytes (1 all-gather + 1 reduce-scatter),
# for the memory of whole parameters during the step — ZeRO-2's trade. To hide the
# communication, the next unit's all-gather is **prefetched** while this unit computes.
#
# Two generations of torch's FSDP, two ways to cut: **FSDP1**
# (`torch.distributed.fsdp.FullyShardedDataParallel`) flattens each unit's parameters
# into one `FlatParameter` and gives each rank one contiguous slice of it; **FSDP2**
# (`torch.distributed.fsdp.fully_shard`) keeps every parameter as its own tensor (a
# DTensor) and cuts each on dim 0, padded to equal pieces. minidp builds FSDP2's cut, in
# the book's page (section 2) and in `minidp.fully_shard` alike; FSDP1's `FlatParameter`
# is described here, not built.
#
# Here: how a parameter is cut, the textbook version, memory per rank, a traced step
# showing what the prefetch hides and what it cannot, and the check against PyTorch's own
# FSDP2 and DDP.

# %%
import contextlib
import inspect

import kit
import torch
import torch.nn.functional as F
from torch import nn

import minidp
from minidp import trace
from minidp.fsdp import full_state_dict, shard, sharded_bytes, traffic
from minidp.textbook.fsdp import FSDP as TextbookFSDP

WORLD = 2
VOCAB, DIM, BLOCKS = kit.pick((256, 128, 4), (64, 32, 3))
BATCH, SEQ, STEPS = kit.pick((8, 64, 4), (4, 16, 3))


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class TinyLM(nn.Module):
    """Embedding, blocks, final norm, output head tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block(DIM) for _ in range(BLOCKS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def make_model() -> TinyLM:
    torch.manual_seed(0)  # FSDP broadcasts nothing: every rank must start from the same weights
    return TinyLM()


def shard_all(model: TinyLM, fully_shard, **kw) -> TinyLM:
    for block in model.blocks:
        fully_shard(block, **kw)  # one unit per block ...
    fully_shard(model, **kw)  # ... and the root: embedding/head, final norm
    return model


# %% [markdown]
# ## 1. How one parameter is cut (FSDP2's rule)
# Dim 0 in `world` chunks of `ceil(rows / world)` rows — `torch.chunk`'s rule, which FSDP2
# uses — every shard padded to the same length so that one all-gather of equal pieces
# rebuilds it. 13 rows on 4 ranks: 4, 4, 4, 1 (rank 3 holds 1 row and 3 rows of padding).

# %%
if __name__ == "__main__":
    kit.title("Lesson 21: FSDP (ZeRO-3) with prefetch")
    for rows, world in ((13, 4), (5, 4), (10, 2)):
        ours = [shard.shard_length(rows, world, r) for r in range(world)]
        chunks = [len(c) for c in torch.arange(rows).chunk(world)]
        theirs = chunks + [0] * (world - len(chunks))  # torch.chunk may return fewer chunks
        print(f"  {rows} rows on {world} ranks: rows per rank {ours}, padded to "
              f"{shard.shard_rows(rows, world)} each")  # fmt: skip
        kit.check_true(
            f"{rows} rows / {world} ranks cut like torch.chunk", ours == theirs, str(theirs)
        )

# %% [markdown]
# ## 2. The textbook version (FSDP2's cut, the whole model one unit)
# All of FSDP's idea on one page (`minidp/textbook/fsdp.py`): every parameter cut on dim 0
# into one piece per rank, padded with zero rows to equal pieces (a piece is FSDP2's
# `to_local()` plus its padding), gathered before the forward, reduce-scattered after the
# backward.

# %%
if __name__ == "__main__":
    print(inspect.getsource(TextbookFSDP.forward))
    print(inspect.getsource(TextbookFSDP.reduce_grads))

# %% [markdown]
# What `minidp.fully_shard` adds (`wrap.py`, `unit.py`, `root.py`): **units**, so only one
# block is gathered at a time; freeing a unit's full weights after its forward
# (`reshard_after_forward`, storage resized to 0 bytes — autograd's saved tensors point at
# the same storage and get their data back at the backward all-gather); one all-gather of a
# unit's pieces together; DTensor shards; and the **prefetch**: when unit i starts, unit
# i+1's all-gather is already sent to the communication thread (backward: unit i-1's).

# %% [markdown]
# ## 3. Two ranks: memory, a traced step, and PyTorch's answer


# %%
def batches(rank: int):
    g = torch.Generator().manual_seed(10 + rank)  # every rank its own data
    return [torch.randint(0, VOCAB, (BATCH, SEQ), generator=g) for _ in range(STEPS)]


def train(model, opt, data, record_step: int | None = None):
    events = []
    for i, tokens in enumerate(data):
        with trace.recording() if i == record_step else contextlib.nullcontext() as rec:
            opt.zero_grad()
            logits = model(tokens[:, :-1])
            F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
            opt.step()
        if i == record_step:
            events = rec.events
    return events


def fsdp_lesson(rank: int, world: int) -> dict:
    torch.set_num_threads(1)
    full = sum(p.nbytes for p in make_model().parameters())  # global: the unsharded model
    out: dict = {"full_bytes": full}
    model = shard_all(make_model(), minidp.fully_shard)
    out["between_steps"] = sharded_bytes(model)
    with torch.no_grad():  # an inference forward frees everything again
        model(batches(rank)[0][:, :-1])
    with torch.enable_grad():  # after a training forward: only the root stays gathered
        logits = model(batches(rank)[0][:, :-1])
        out["after_forward"] = sharded_bytes(model)
        logits.sum().backward()
    model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = traffic(model).sent_bytes
    out["events"] = train(model, opt, batches(rank), record_step=STEPS - 1)
    out["sent"] = traffic(model).sent_bytes - before  # all STEPS steps
    kept = shard_all(make_model(), minidp.fully_shard, reshard_after_forward=False)
    train(kept, torch.optim.AdamW(kept.parameters(), lr=1e-2), batches(rank))
    out["sent_kept"] = traffic(kept).sent_bytes
    out["last_step"] = sharded_bytes(model)  # its peak_gathered: the most held at once
    out["minidp"] = full_state_dict(model)
    w = model.emb.weight  # the DTensor fully_shard put there: how torch sees the shard
    out["dtensor"] = {
        "type": type(w).__name__,
        "placements": str(w.placements),
        "global shape": tuple(w.shape),
        "local shape": tuple(w.to_local().shape),  # this rank's rows only
        "no copy": w.to_local().data_ptr() == minidp.fsdp.unit_of(model).padded[0].data_ptr(),
    }
    before = traffic(model).sent_bytes  # minidp's collectives: none run by DTensor
    out["dtensor"]["full_tensor"] = torch.equal(w.full_tensor(), out["minidp"]["emb.weight"])
    out["dtensor"]["minidp bytes"] = traffic(model).sent_bytes - before
    # PyTorch: plain DDP (any torch) and FSDP2 (torch >= 2.8, but not 2.8: kit.why_no_fsdp2)
    ddp = nn.parallel.DistributedDataParallel(make_model())
    train(ddp, torch.optim.AdamW(ddp.parameters(), lr=1e-2), batches(rank))
    out["ddp"] = {n: p.detach() for n, p in ddp.module.named_parameters()}
    if not kit.why_no_fsdp2():
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        fsdp2 = shard_all(make_model(), fully_shard, mesh=init_device_mesh("cpu", (world,)))
        train(fsdp2, torch.optim.AdamW(fsdp2.parameters(), lr=1e-2), batches(rank))
        out["fsdp2"] = {n: p.full_tensor().detach() for n, p in fsdp2.named_parameters()}
    return out


if __name__ == "__main__":
    res = kit.spawn(fsdp_lesson, WORLD)
    r0 = res[0]
    kit.section("memory per rank (read from the tensors)")
    full, between, after = r0["full_bytes"], r0["between_steps"], r0["after_forward"]
    print(f"  the whole model: {full:,} bytes of parameters")
    print(f"  rank 0 between steps: {between['params']:,} bytes of shards (1/{WORLD} + padding), "
          f"{between['gathered']:,} gathered")  # fmt: skip
    print(f"  rank 0 after a training forward: {after['gathered']:,} bytes gathered "
          "(the root's embedding/head and norm; every block freed again)")  # fmt: skip
    padded = sum(  # global shapes: ceil(rows / world) rows of each row size, float32
        shard.shard_rows(p.shape[0], WORLD) * p[0].numel() * 4 for p in make_model().parameters()
    )
    kit.check_true(
        "rank 0's shards: ceil(rows / world) rows of every parameter",
        between["params"] == padded,
        f"{between['params']:,} bytes = {between['params'] / full:.3f} of the model",
    )
    root_bytes = (VOCAB * DIM + 2 * DIM) * 4  # tied embedding/head + final norm, float32
    kit.check_true(
        "after forward only the root unit is gathered",
        after["gathered"] == root_bytes,
        f"{after['gathered']:,} bytes",
    )
    block_bytes = sum(p.nbytes for p in Block(DIM).parameters())  # global: a whole block
    peak = r0["last_step"]["peak_gathered"]
    print(f"  rank 0's peak during a training step: {peak:,} bytes of full parameters "
          f"(root {root_bytes:,}, a block {block_bytes:,}; at most the block computing and "
          "the one prefetched)")  # fmt: skip
    kit.check_true(
        "peak: the root and at most two blocks gathered at once, not the whole model",
        root_bytes + block_bytes <= peak <= root_bytes + 2 * block_bytes < full,
        f"{peak:,} of {full:,} bytes",
    )

# %% [markdown]
# ### The traced step (rank 0): what the prefetch hid, and what it did not
# `compute` spans: each unit's forward and backward (the root's spans enclose the
# blocks'), and `wait all-gather ...`: the compute thread blocked on a gather it needs
# now. `hooks`: the moment an all-gather is *issued*. `comm`: the collectives, one after
# another on the single communication thread. Times in ms from the step's start.

# %%
if __name__ == "__main__":
    events = [e for e in r0["events"] if e["pid"] == 0 and e["name"] not in ("send", "recv")]
    t0 = min(e["ts"] for e in events)
    print(f"  {'lane':<8} {'ms':<20} event")
    for e in sorted(events, key=lambda e: e["ts"]):
        when = f"{(e['ts'] - t0) / 1e3:7.2f}"
        if "dur" in e:
            when += f" .. {(e['ts'] + e['dur'] - t0) / 1e3:7.2f}"
        print(f"  {e['tid']:<8} {when:<20} {e['name']}")
    path = trace.save(
        # the repository's out/ (git ignores it): one file, overwritten by each run
        kit.HERE.parent / "out" / "lesson21_fsdp_step.trace.json",
        *(r["events"] for r in res),
    )
    print(f"\nChrome trace of both ranks: {path} (open it in https://ui.perfetto.dev)")

# %% [markdown]
# Issuing a gather early is not hiding it. For each all-gather: how long it waited between
# being issued and starting on the comm thread (**queued**), and *behind what*: the
# collectives still running, or waiting ahead of it in the queue, at the moment it was
# issued — "nothing" when the comm thread was idle, and the wait was only that thread
# waking up. Then how long it ran, and how much of that the compute thread spent blocked on
# it (**exposed**) — the rest ran while the compute thread worked (**hidden**).

# %%
if __name__ == "__main__":
    comm = sorted((e for e in events if e["tid"] == "comm"), key=lambda e: e["ts"])
    issues = sorted((e for e in events if e["name"].startswith("issue ")), key=lambda e: e["ts"])
    waits = [e for e in events if e["tid"] == "compute" and e["name"].startswith("wait all-gather")]
    gathers, pending = [], list(comm)

    def end(e: dict) -> float:
        return e["ts"] + e["dur"]

    for issue in issues:  # pair each issue with its run on the comm thread, in order
        name = issue["name"].removeprefix("issue ")
        run = next(e for e in pending if e["name"] == name and e["ts"] >= issue["ts"])
        pending.remove(run)
        # ahead of it: running when it was issued (ends after the issue), or queued before it
        # (starts between the issue and its own start) — not one that had already finished
        ahead = [e for e in comm if e is not run and e["ts"] < run["ts"] and end(e) > issue["ts"]]
        # the compute thread's wait for this gather: the one that ends right after it
        wait = min(
            (w for w in waits if w["name"] == "wait " + name and w["ts"] + w["dur"] >= run["ts"]),
            key=lambda w: w["ts"],
            default=None,
        )
        gathers.append((name, issue, run, ahead, wait))
    print(f"  {'all-gather':<20}{'queued ms':>10}{'ran ms':>8}{'exposed ms':>11}{'hidden ms':>10}"
          "   queued behind")  # fmt: skip
    exposed_total = ran_total = 0.0
    for name, issue, run, ahead, wait in gathers:
        queued = (run["ts"] - issue["ts"]) / 1e3
        ran = run["dur"] / 1e3
        # exposed: the part of the gather's run during which the compute thread was waiting
        # (a wait that begins after the gather ended is thread scheduling, not the gather)
        exposed = 0.0
        if wait:
            start, stop = max(wait["ts"], run["ts"]), min(end(wait), end(run))
            exposed = max(0.0, stop - start) / 1e3
        exposed_total, ran_total = exposed_total + exposed, ran_total + ran
        behind = ", ".join(e["name"] for e in ahead) or "nothing"
        print(f"  {name:<20}{queued:>10.2f}{ran:>8.2f}{exposed:>11.2f}{ran - exposed:>10.2f}"
              f"   {behind}")  # fmt: skip
    print(f"  all-gathers: {ran_total:.1f} ms, of which {exposed_total:.1f} ms exposed")
    behind_rs = [name for name, _, _, ahead, _ in gathers
                 if any(e["name"].startswith("reduce-scatter") for e in ahead)]  # fmt: skip
    print(f"  gathers that queued behind a reduce-scatter in this step: {len(behind_rs)} "
          f"{behind_rs or ''}")  # fmt: skip
    kit.check_true(
        "one comm thread, in order: every collective a gather queued behind was running or "
        "waiting when it was issued, and had ended before the gather started",
        all(
            end(e) > issue["ts"] and end(e) <= run["ts"]
            for _, issue, run, ahead, _ in gathers
            for e in ahead
        ),
    )
    # backward: unit k+2's reduce-scatter is issued when its backward ends, unit k's gather
    # when unit k+1's backward starts — after it, so it runs after it on the one thread
    rs = {
        e["name"].removeprefix("reduce-scatter "): e for e in comm if "reduce-scatter" in e["name"]
    }
    after = [
        (name, run["ts"] >= end(rs[f"unit {int(name.split()[-1]) + 2}"]))
        for name, _, run, _, _ in gathers[BLOCKS + 1 :]
        if int(name.split()[-1]) + 2 <= BLOCKS
    ]
    kit.check_true(
        "backward: each prefetched gather starts only after the reduce-scatter issued before it "
        "(unit k's gather after unit k+2's reduce-scatter)",
        bool(after) and all(ok for _, ok in after),
        str(after),
    )

# %% [markdown]
# Here most of the gathering is exposed, for two reasons the trace shows. A block's
# compute is a fraction of a millisecond and a gloo collective on a shared CPU takes
# milliseconds: there is little compute to hide behind. And one comm thread runs every
# collective in the order it was issued: in backward, unit k's prefetched gather is issued
# just after unit k+2's reduce-scatter, so it cannot start before that reduce-scatter has
# ended — when the reduce-scatter is still running at that moment, the gather queues behind
# it (the table names it) while the compute thread may be waiting for it. FSDP2 on GPUs runs
# all-gathers and reduce-scatters on *separate CUDA streams*, so a reduce-scatter does not
# hold up the next gather, and lets you prefetch further ahead explicitly:
# `module.set_modules_to_forward_prefetch([...])` and
# `set_modules_to_backward_prefetch([...])` name the units to gather next.
#
# The checks read the trace, not the issue order: no unit computes before its gather has
# ended, and a wait that overlaps its gather is the compute thread waiting for it (it ends
# only after the gather has; on a busy machine the compute thread may get the CPU back a few
# ms later still). A wait that begins after its gather ended hid nothing: it is the thread
# getting the CPU back, and is not counted as exposed.

# %%
if __name__ == "__main__":
    first_fwd = {e["name"]: e for e in reversed(events) if e["name"].startswith("forward")}
    ok = all(
        end(run) <= first_fwd[f"forward {name.removeprefix('all-gather ')}"]["ts"]
        for name, _, run, _, _ in gathers[: BLOCKS + 1]  # the forward gathers: root, units 1..
    )
    kit.check_true("no unit computes its forward before its all-gather has ended", ok)
    back = gathers[BLOCKS + 1 :]  # the backward's second gathers
    ok = all(
        end(run)
        <= next(e["ts"] for e in events if e["name"] == f"backward {n.removeprefix('all-gather ')}")
        for n, _, run, _, _ in back
    )
    kit.check_true("no unit computes its backward before its all-gather has ended", ok)
    late = [  # a wait that begins while its gather still runs must end only after it has
        (name, (end(wait) - end(run)) / 1e3)
        for name, _, run, _, wait in gathers
        if wait is not None and wait["ts"] <= end(run) and not end(run) <= end(wait)
    ]
    kit.check_true(
        "each wait that overlaps its gather lasts until the gather has ended", not late, str(late)
    )
    per_step, per_step_kept = r0["sent"] / STEPS, r0["sent_kept"] / STEPS
    print(f"  bytes sent per step: {per_step:,.0f} resharding after forward, "
          f"{per_step_kept:,.0f} with reshard_after_forward=False")  # fmt: skip
    kit.check_true(
        "reshard_after_forward=False: no backward all-gather, 2/3 of the bytes (DDP's)",
        abs(per_step_kept / per_step - 2 / 3) <= 0.05,
        f"{per_step_kept / per_step:.3f}",
    )

# %% [markdown]
# ### The shard as torch sees it: a DTensor
# `fully_shard` replaced each parameter, once, by a `DTensor` (FSDP2 does the same): this
# rank's rows (the *local* tensor, a view of the unit's padded shard — no copy) plus a
# placement, `Shard(0)`, on a torch `DeviceMesh` of the ranks, so torch knows the global
# shape. DTensor only *describes* the shard: every all-gather and reduce-scatter above was
# minidp's own (send/recv, `traffic`). DTensor communicates only when a torch API asks —
# `full_tensor()` here, with torch's own all-gather (minidp's counters do not move), or
# `clip_grad_norm_`'s global norm (lesson 32), or a DCP checkpoint.

# %%
if __name__ == "__main__":
    for rank, r in enumerate(res):
        d = r["dtensor"]
        print(f"  rank {rank}: emb.weight is a {d['type']}, placements {d['placements']}, "
              f"global shape {d['global shape']}, local shape {d['local shape']}")  # fmt: skip
    kit.check_true(
        "each rank's local rows are its torch.chunk of the global tensor, in place (no copy)",
        [r["dtensor"]["local shape"][0] for r in res]
        == [len(c) for c in torch.arange(res[0]["dtensor"]["global shape"][0]).chunk(WORLD)]
        and all(r["dtensor"]["no copy"] for r in res),
    )
    kit.check_true(
        "full_tensor() (torch's all-gather) = minidp's full weights; minidp sent 0 bytes for it",
        all(r["dtensor"]["full_tensor"] and r["dtensor"]["minidp bytes"] == 0 for r in res),
    )

# %% [markdown]
# ### Against PyTorch
# Same model, same wrapping, same per-rank data, AdamW, several steps. With 2 ranks every
# averaged gradient element is one addition and one halving — the same bits whichever
# wrapper adds them — so minidp's FSDP equals FSDP2 *and* plain DDP bit for bit.
# (`tests/test_fsdp.py` also checks 3 and 4 ranks, shards, gradients and bf16.)

# %%
if __name__ == "__main__":
    for rank, r in enumerate(res):
        kit.check(f"rank {rank}: minidp FSDP vs torch DDP, all parameters", r["minidp"], r["ddp"])
        if "fsdp2" in r:
            kit.check(
                f"rank {rank}: minidp FSDP vs torch FSDP2 (fully_shard)", r["minidp"], r["fsdp2"]
            )
        else:
            print(f"  (FSDP2 skipped: {kit.why_no_fsdp2()})")

# %% [markdown]
# ## Exercise
# Write one FSDP unit's step yourself — pad and all-gather the shards, forward, backward,
# pad and reduce-scatter the gradients — checked against torch DDP's averaged gradients:
# `python -m minidp exercise check fsdp_unit` (stub: `lessons/exercises/fsdp_unit.py`).

# %%
if __name__ == "__main__":
    kit.done()
