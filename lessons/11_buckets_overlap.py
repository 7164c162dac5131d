# %% [markdown]
# # Lesson 11 — buckets and overlap, with the timeline
#
# Run: `python lessons/11_buckets_overlap.py`
# Picture: `diagrams/ddp_timeline.png`, `diagrams/bucket_sweep.png` (`python -m minidp diagrams`)
#
# Lesson 10 waited for the *whole* backward, then sent everything in one all-reduce. But
# backward produces gradients last layer first: the last layers' gradients are ready long
# before the first layers'. DDP groups gradients into **buckets** (about `bucket_cap_mb`
# each, in the order gradients become ready) and all-reduces a bucket as soon as it is
# full — on a communication thread, *while* autograd keeps computing.
# One article: DDP "synchronises layer by layer, streaming, without a global sync" — it is
# bucket by bucket, and there is one wait at the end of backward.
#
# Rules that also decide the bits (so minidp copies torch exactly):
# * first iteration: one bucket (the real gradient order is not known yet);
# * from the second: rebuilt in the observed ready order, caps `[first, cap]`;
# * buckets launch strictly in index order, on every rank the same.
#
# Here: the bucket layouts against torch's own function and reducer, a traced step on 2
# real ranks (Chrome trace saved; a text timeline printed), overlap on vs off.

# %%
import contextlib
import inspect
import statistics
import time

import kit
import torch
import torch.distributed as dist
from torch import nn

import minidp
from minidp import trace
from minidp.ddp import compute_bucket_assignment_by_size
from minidp.textbook import ddp as textbook
from minidp.tools.bench.verdict import compare

WORLD = 2
WIDTH, DEPTH = kit.pick((512, 6), (128, 4))
CAP_MB = kit.pick(0.25, 0.02)
STEPS = kit.pick(12, 8)  # 2 warm-up steps, then the timed pairs

# %% [markdown]
# ## 1. Bucket assignment, against torch's own function

# %%
if __name__ == "__main__":
    kit.title("Lesson 11: buckets and overlap, with the timeline")
    model = kit.make_model(seed=0, width=WIDTH, depth=DEPTH)
    params = list(model.parameters())
    names = [n for n, _ in model.named_parameters()]
    cap = int(CAP_MB * 2**20)
    ready_order = list(reversed(range(len(params))))  # what backward produces (lesson 10)
    ready = [params[i] for i in ready_order]
    ours = compute_bucket_assignment_by_size(ready, [cap, cap], tensor_indices=ready_order)[0]
    theirs = dist._compute_bucket_assignment_by_size(ready, [cap, cap], tensor_indices=ready_order)[
        0
    ]
    print(
        f"{len(params)} parameters, {sum(p.numel() for p in params) * 4:,} bytes; cap {cap:,} bytes"
    )
    for b, idx in enumerate(ours):
        size = sum(params[i].numel() * 4 for i in idx)
        print(f"  bucket {b}: {', '.join(names[i] for i in idx):<40} {size:>10,} bytes")
    print("(a bucket closes once it reaches the cap, so it can exceed it)")


# %% [markdown]
# ## 2. The textbook buckets and hooks, in minidp's own source
# `minidp.textbook.ddp` keeps only the idea: buckets filled last layer first, and a hook
# that launches every full bucket (in index order) on a communication thread; the last
# hook waits for them all (`_finish`). Printed with `inspect.getsource`:

# %%
if __name__ == "__main__":
    shown = [
        inspect.getsource(textbook.make_buckets),
        inspect.getsource(textbook.DistributedDataParallel._grad_ready),
    ]
    print("\n".join(shown))

# %% [markdown]
# What the faithful reducer (`minidp/ddp/reducer.py`, `buckets.py`) adds — and why it
# matters for the bits: the *first* iteration uses one bucket (the real gradient order is
# not known yet); after it the buckets are **rebuilt** in the order gradients really
# arrived, with a small first bucket (1 MiB by default), one bucket list per dtype and
# device, and rank 0's layout broadcast so all ranks agree. From 3 ranks on, the ring's
# summation order follows the bucket boundaries, so only torch's exact layout gives
# torch's bits; with 2 ranks (one addition per element) any layout does — the check
# below runs the textbook DDP against torch DDP on these 2 ranks, bit for bit.

# %% [markdown]
# ## 3. One traced step on 2 ranks
# Each rank records: forward/backward spans (ours), the reducer's "grad ready" hooks,
# bucket launches and the all-reduces on the communication thread (minidp's own
# events). The third step is traced: the buckets have been rebuilt by then.


# %%
def step_times(ddp, data, record: int | None = None):
    """Run the steps; return (times, events of step ``record``)."""
    times, events = [], []
    for i, (xb, yb) in enumerate(data):
        with trace.recording() if i == record else contextlib.nullcontext() as rec:
            t0 = time.perf_counter()
            with trace.span("forward + loss", lane="compute"):
                loss = nn.functional.cross_entropy(ddp(xb), yb)
            with trace.span("backward", lane="compute"):
                loss.backward()
            times.append(time.perf_counter() - t0)
        if i == record:
            events = rec.events
        ddp.module.zero_grad()
    return times, events


def buckets_lesson(rank: int, world: int) -> dict:
    torch.set_num_threads(1)  # two ranks on two cores: one each
    x, y = kit.make_data(STEPS * 128, seed=10 + rank)
    data = kit.batches(x, y, 128)
    out = {}
    for overlap in (True, False):
        ddp = minidp.DistributedDataParallel(
            kit.make_model(seed=0, width=WIDTH, depth=DEPTH), bucket_cap_mb=CAP_MB, overlap=overlap
        )
        times, events = step_times(ddp, data, record=2)
        out[overlap] = {"times": times[2:], "events": events, "buckets": ddp.reducer.assignment}
    ref_model, mine_model, tb_model, off_model = (
        kit.make_model(seed=0, width=WIDTH, depth=DEPTH) for _ in range(4)
    )
    ref = nn.parallel.DistributedDataParallel(ref_model, bucket_cap_mb=CAP_MB)
    mine = minidp.DistributedDataParallel(mine_model, bucket_cap_mb=CAP_MB)
    tb = textbook.DistributedDataParallel(tb_model, bucket_cap_mb=CAP_MB)
    off = minidp.DistributedDataParallel(off_model, bucket_cap_mb=CAP_MB, overlap=False)
    nets = {"minidp": mine, "minidp, no overlap": off, "torch": ref, "textbook": tb}
    opts = {name: torch.optim.SGD(net.parameters(), lr=0.05) for name, net in nets.items()}
    times: dict[str, list[float]] = {name: [] for name in nets}
    for xb, yb in data:  # the four take turns step by step: load hits them alike
        for name, net in nets.items():
            opts[name].zero_grad()
            dist.barrier()  # the ranks start each step together
            t0 = time.perf_counter()
            nn.functional.cross_entropy(net(xb), yb).backward()
            times[name].append(time.perf_counter() - t0)
            opts[name].step()
    for name, net in nets.items():  # steps 0-1: first iteration and the bucket rebuild
        out[name] = {"times": times[name][2:], "model": net.module}
    out["textbook_buckets"] = len(tb.buckets)
    index = {id(p): i for i, p in enumerate(ref_model.parameters())}
    # torch's reducer buckets (private API, read only): the layout it really used
    out["torch_buckets"] = [
        [index[id(p)] for p in b.parameters()] for b in ref.reducer._get_zeros_like_grad_buckets()
    ]
    out["minidp_buckets"] = mine.reducer.assignment
    dist.barrier()
    return out


if __name__ == "__main__":
    res = kit.spawn(buckets_lesson, WORLD)
    traced = res[0][True]["events"]
    path = trace.save(
        # the repository's out/ (git ignores it): one file, overwritten by each run
        kit.HERE.parent / "out" / "lesson11_ddp_step.trace.json",
        *(r[True]["events"] for r in res),
    )
    backward = next(e for e in traced if e["name"] == "backward" and e["pid"] == 0)
    t0, t_end = backward["ts"], backward["ts"] + backward["dur"]
    print(
        f"rank 0, third step, times in ms from the start of backward (ends at {(t_end - t0) / 1e3:.1f}):"
    )
    for e in sorted(traced, key=lambda e: e["ts"]):
        if e["pid"] != 0 or e["name"] in ("send", "recv", "forward", "forward + loss", "backward"):
            continue
        what = e["name"] + (f" {e['args'].get('param', '')}" if e["name"] == "grad ready" else "")
        when = f"{(e['ts'] - t0) / 1e3:7.2f}"
        if "dur" in e:
            when += f" .. {(e['ts'] + e['dur'] - t0) / 1e3:7.2f}"
        print(f"  {e['tid']:<9} {when:<20} {what}")
    last_grad = max(e["ts"] for e in traced if e["name"] == "grad ready" and e["pid"] == 0)
    comm = [e for e in traced if e["pid"] == 0 and e["name"].startswith("all-reduce")]
    during = sum(max(0.0, min(e["ts"] + e["dur"], last_grad) - max(e["ts"], t0)) for e in comm)
    total = sum(e["dur"] for e in comm)
    print(
        f"all-reduce time on rank 0: {total / 1e3:.1f} ms, of which {during / 1e3:.1f} ms ran while "
        "autograd was still computing gradients (an all-reduce also waits for the other rank)"
    )
    print(
        f"\nChrome trace of both ranks: {path}\n  (open it in https://ui.perfetto.dev — one track per rank)"
    )

# %% [markdown]
# ## 4. Overlap on vs off, and torch
# `overlap=False` holds every bucket until backward is over (lesson 10's schedule with
# buckets). The four DDPs took turns step by step (rank 0's clock, after the rebuild), so a
# burst of load hits them alike; each pair of turns gives one ratio, and a verdict is
# given only beyond the spread of those ratios. On 2 shared CPU cores the communication
# thread competes with autograd for the same cores, so the gain is smaller than on GPUs,
# where communication runs on its own hardware — and often within the noise.

# %%
if __name__ == "__main__":
    t = {
        name: res[0][name]["times"]
        for name in ("minidp", "minidp, no overlap", "torch", "textbook")
    }
    for name, ts in t.items():
        q1, med, q3 = statistics.quantiles(ts, n=4, method="inclusive")
        print(
            f"  {name + ' DDP':<24} median {med * 1e3:7.1f} ms  (middle half {q1 * 1e3:.1f}-{q3 * 1e3:.1f})"
        )
    print("  " + compare(t["minidp, no overlap"], t["minidp"], "no overlap", "overlap").sentence())
    print("  " + compare(t["torch"], t["minidp"], "torch DDP", "minidp DDP").sentence())
    print(f"  ({kit.machine()}; each rank uses 1 intra-op thread)")

# %% [markdown]
# ## 5. Checks

# %%
if __name__ == "__main__":
    kit.check_true(
        "minidp compute_bucket_assignment_by_size == torch.distributed's", ours == theirs, str(ours)
    )
    kit.check_true(
        "minidp DDP's buckets after the rebuild == torch reducer's buckets",
        res[0]["minidp_buckets"] == res[0]["torch_buckets"],
        str(res[0]["torch_buckets"]),
    )
    for r in range(WORLD):
        kit.check(
            f"rank {r}: minidp DDP vs torch DDP after {STEPS} steps",
            res[r]["minidp"]["model"],
            res[r]["torch"]["model"],
        )

    for r in range(WORLD):
        kit.check(
            f"rank {r}: textbook DDP ({res[r]['textbook_buckets']} buckets) vs torch DDP, "
            f"{STEPS} steps (2 ranks: one addition per element)",
            res[r]["textbook"]["model"],
            res[r]["torch"]["model"],
        )
    kit.check_true(
        "the functions shown in section 2 are minidp.textbook.ddp's own source, not copies",
        all(block in inspect.getsource(textbook) for block in shown),
    )

    def launched_before_last_gradient(events) -> list[bool]:
        """Per bucket launch on rank 0: did it leave before the last gradient was ready?"""
        last_grad = max(e["ts"] for e in events if e["name"] == "grad ready" and e["pid"] == 0)
        return [
            e["ts"] < last_grad for e in events if e["name"] == "bucket launch" and e["pid"] == 0
        ]

    early = launched_before_last_gradient(res[0][True]["events"])
    late = launched_before_last_gradient(res[0][False]["events"])
    kit.check_true(
        "overlap: every bucket but the last launched while backward was still computing",
        len(early) > 1 and early[:-1] == [True] * (len(early) - 1),
        f"{sum(early)} of {len(early)} launched early",
    )
    kit.check_true(
        "overlap=False: every launch waited for the last gradient",
        len(late) > 1 and not any(late),
    )
    kit.done()

# %% [markdown]
# ## Your turn
# Write bucketed DDP with hooks yourself; the checker compares the gradients with torch
# DDP's and checks that buckets leave during backward:
# `python -m minidp exercise check bucketed_ddp`.

# %%
if __name__ == "__main__":
    print("Exercise: python -m minidp exercise check bucketed_ddp")
    print(
        "Exercise: DDP's bucket assignment yourself — python -m minidp exercise check bucket_assignment"
    )
