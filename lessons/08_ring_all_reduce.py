# %% [markdown]
# # Lesson 8 — ring all-reduce: reduce-scatter + all-gather, then bus bandwidth
#
# Run: `python lessons/08_ring_all_reduce.py`
# Classroom version of part 1: `python -m minidp demo ring --step`
# Pictures: `diagrams/ring_steps.png`, `diagrams/traffic.png`
#
# Cut the tensor into n chunks. **Reduce-scatter**: n-1 steps in which every rank passes
# a partial sum of one chunk to its neighbour, which adds its own piece; afterwards each
# rank owns one fully summed chunk. **All-gather**: n-1 more steps passing the finished
# chunks round. 2(n-1) steps, and every rank sends `2(n-1)/n · S` bytes.
#
# Claims from the articles, measured here:
# * "after N iterations every GPU holds the sum" — it takes 2(n-1) steps, and after the
#   first n-1 each rank holds only *one chunk* of the sum;
# * "the ring's communication cost does not depend on the number of GPUs" — per-rank
#   bytes are `2(n-1)/n · S`: almost, but not quite, flat (S at n=2, 1.75·S at n=8), and
#   the number of sequential steps (each paying a latency) grows with n.
#
# Then the bit-level fact minidp is built on: with gloo's chunk layout, minidp's ring is
# **bit-for-bit** gloo's `all_reduce`; and the standard way to report collective speed,
# bus bandwidth (busbw), measured on this machine.

# %%
import inspect
import time

import kit
import torch
import torch.distributed as dist

import minidp
from minidp.comm import group as groups
from minidp.comm import ring
from minidp.textbook import collectives as textbook
from minidp.tools.demo import ring as ring_demo

# %% [markdown]
# ## 1. Step by step, on 4 real ranks
# The demo runs minidp's `ring_all_reduce` on thread-ranks through a tapped group that
# logs every message, then replays the log. Rank r holds multiples of 10^r, so each digit
# of a partial sum tells whose piece is already in it.

# %%
if __name__ == "__main__":
    kit.title("Lesson 8: ring all-reduce = reduce-scatter + all-gather; busbw")
    run = ring_demo.record_ring(4, 8)
    style = ring_demo.Style(color=False, unicode=True)
    for line in ring_demo.render_intro(run, style):
        print(line)
    for step in run.steps:
        print()
        for line in ring_demo.render_step(run, step, style):
            print(line)
    rs_done = run.steps[len(run.steps) // 2 - 1].after
    total = run.grid([sum(run.inputs)] * 4)
    owned = [[c for c in range(4) if torch.equal(rs_done[r][c], total[r][c])] for r in range(4)]
    print(f"\nafter {len(run.steps) // 2} reduce-scatter steps, finished chunks per rank: {owned}")
    print(f"all ranks hold the whole sum after {len(run.steps)} = 2(n-1) steps, not n")

# %% [markdown]
# ## 1b. The ring in code, in one page
# `minidp/textbook/collectives.py` is the ring exactly as drawn above, in plain send/recv: one
# chunk per rank, a reduce-scatter loop, then an all-gather loop. Printed here from the
# real module (not a copy), then run on 4 thread ranks against gloo.

# %%
TEXTBOOK_RING = (textbook._exchange, textbook.ring_all_reduce)  # what this lesson shows
FAITHFUL_RING = (ring.ring_pass, ring.ring_all_reduce)  # what it is compared with


def source_of(*fns) -> str:
    return "\n".join(inspect.getsource(fn) for fn in fns)


def lines_of(*fns) -> int:
    return sum(len(inspect.getsource(fn).splitlines()) for fn in fns)


def textbook_vs_gloo(rank: int, world: int, dtype: torch.dtype) -> dict:
    g = torch.Generator().manual_seed(100 + rank)
    x = (torch.randn(10, generator=g) * 4).to(dtype)
    ours, theirs = x.clone(), x.clone()
    textbook.ring_all_reduce(ours)
    dist.all_reduce(theirs, group=groups.resolve())
    return {"ours": ours, "theirs": theirs}


if __name__ == "__main__":
    print(source_of(*TEXTBOOK_RING))
    textbook_runs = {
        (n, dtype): minidp.launch.run_threads(textbook_vs_gloo, n, dtype)
        for n, dtype in ((4, torch.int64), (2, torch.float32), (4, torch.float32))
    }
    print(
        f"The textbook ring is {lines_of(*TEXTBOOK_RING)} lines. The faithful one, "
        f"minidp.comm.ring_all_reduce, is {lines_of(*FAITHFUL_RING)} lines of ring_pass + "
        "ring_all_reduce, and adds:\n"
        "  * gloo's chunk layout: chunk boundaries at multiples of gloo's segment (the\n"
        "    direction and association order are the same as here, gloo's), so the bits\n"
        "    equal dist.all_reduce's;\n"
        "  * pipelined segments: a chunk travels as several messages, each forwarded the\n"
        "    moment it is summed, so sending one overlaps adding the next;\n"
        "  * windowing: receives posted a few segments ahead into reused buffers;\n"
        "  * the cross-rank agreement check (agree.py): mismatched calls raise the same\n"
        "    MismatchError on every rank instead of pairing up wrongly or timing out."
    )
    for (n, dtype), res in textbook_runs.items():
        diff = max((r["ours"].double() - r["theirs"].double()).abs().max().item() for r in res)
        print(f"textbook ring, n={n} {dtype}: max |diff| vs gloo {diff:.3g}")


# %% [markdown]
# ## 2. Bytes per rank as the world grows: ring vs parameter server
# S = 1 MiB of float32 (fast mode: 16 KiB). Header-check bytes (minidp's "did every rank
# call the same collective" exchange, measured with `barrier()`) are subtracted.

# %%
NUMEL = kit.pick(256 * 1024, 4096)
S = NUMEL * 4
WORLDS = kit.pick([2, 3, 4, 6, 8], [2, 4, 8])


def traffic(rank: int, world: int) -> dict:
    out = {}
    for name, fn in (
        ("ring", minidp.comm.ring_all_reduce),
        ("server", minidp.comm.naive_all_reduce),
    ):
        x = torch.ones(NUMEL)
        with minidp.comm.count_traffic() as t:
            fn(x)
        with minidp.comm.count_traffic() as h:
            minidp.comm.barrier()
        out[name] = (t.sent_bytes - h.sent_bytes, t.sent_msgs - h.sent_msgs)
    return out


if __name__ == "__main__":
    print(
        f"{'n':>3} {'ring, every rank':>17} {'2(n-1)/n*S':>12} {'server, rank 0':>15} {'(n-1)*S':>11}"
    )
    measured = {}
    for n in WORLDS:
        res = minidp.launch.run_threads(traffic, n)
        measured[n] = res
        ring_b = res[0]["ring"][0]
        print(
            f"{n:>3} {ring_b:>17,} {2 * (n - 1) * S // n:>12,} {res[0]['server'][0]:>15,} "
            f"{(n - 1) * S:>11,}"
        )
    print("ring: per-rank bytes level off below 2S; the server's grow with n.")

# %% [markdown]
# ## 3. Bit for bit with gloo
# Float addition is not associative, so *which* partial sums meet decides the bits.
# minidp's engine ring (`minidp.comm.ring_all_reduce`) cuts chunks and segments exactly as
# gloo does and adds in gloo's order; the book's ring above (equal chunks) gives the same
# sum up to rounding, and gloo's bits only where its chunk boundaries happen to coincide.


# %%
def bits(rank: int, world: int, numel: int) -> dict:
    g = torch.Generator().manual_seed(7 * numel + rank)
    x = torch.randn(numel, generator=g)
    ours, book, theirs = x.clone(), x.clone(), x.clone()
    minidp.comm.ring_all_reduce(ours)  # the engine's: gloo's layout
    textbook.ring_all_reduce(book)  # the book's: equal chunks
    dist.all_reduce(theirs, group=groups.resolve())
    return {"ours": ours, "textbook": book, "theirs": theirs}


if __name__ == "__main__":
    cases = kit.pick([(3, 1001), (4, 100_003), (5, 7), (8, 300_001)], [(3, 1001), (4, 4099)])
    exact = {}
    for n, numel in cases:
        res = minidp.launch.run_threads(bits, n, numel)
        exact[(n, numel)] = res
        tb = max((r["textbook"] - r["theirs"]).abs().max().item() for r in res)
        same = all(torch.equal(r["ours"], r["theirs"]) for r in res)
        print(f"n={n} numel={numel:>7}: engine ring bit-equal on every rank: {same};", end="")
        print(f" book's ring max |diff| {tb:.2g}")

# %% [markdown]
# ## 3b. Where the bytes live: gloo, NCCL and GPU memory
# A send hands the backend a pointer. **gloo** writes those bytes to a TCP socket, so
# the pointer must be host memory: torch's gloo *collectives* copy a CUDA tensor to the
# host and back themselves, but its point-to-point `send`/`recv` — what this ring is
# made of — do not (a CUDA tensor there aborts the process with "Bad address").
# **NCCL** moves GPU memory only, GPU to GPU (NVLink, PCIe, InfiniBand), never through
# the host. So minidp's `p2p` layer asks, per message, whether the group's backend can
# read the tensor where it is, and copies it where it can if not (`comm/device.py`):
# a CUDA tensor on gloo goes through the host — the one-GPU classroom, two ranks sharing
# a GPU, must use gloo because NCCL refuses two ranks on one device; on NCCL it goes as
# it is. The copies change no bits: the ring's sums are the same on either side.


# %%
if __name__ == "__main__":
    from minidp.comm.device import reads

    backends = ("gloo", "nccl", "cpu:gloo,cuda:nccl")
    print(f"{'backend':>20} | {'cpu tensor':^12} | {'cuda tensor':^12}")
    for backend in backends:
        cells = [
            "as it is" if reads(backend, kind) else ("via GPU" if kind == "cpu" else "via host")
            for kind in ("cpu", "cuda")
        ]
        print(f"{backend:>20} | {cells[0]:^12} | {cells[1]:^12}")

# %% [markdown]
# ## 4. Bus bandwidth
# `algbw = S / time`. For all-reduce, `busbw = algbw · 2(n-1)/n`: the rate each link
# actually carries, comparable across world sizes and with the link's raw bandwidth
# (lesson 6 measured loopback). Real processes, 2 ranks (one per core on this machine);
# best of several runs.

# %%
BUS_SIZES = kit.pick([2**k for k in range(12, 25, 2)], [2**12, 2**18])  # bytes
REPEATS = kit.pick(10, 2)


def timing(rank: int, world: int) -> dict:
    rows = {}
    for nbytes in BUS_SIZES:
        x = torch.ones(nbytes // 4)
        best = {}
        for name in ("minidp ring", "torch gloo"):
            t_best = float("inf")
            for _ in range(REPEATS):
                dist.barrier()
                t0 = time.perf_counter()
                if name == "minidp ring":
                    minidp.comm.ring_all_reduce(x)
                else:
                    dist.all_reduce(x)
                t_best = min(t_best, time.perf_counter() - t0)
            best[name] = t_best
        rows[nbytes] = best
    return rows


if __name__ == "__main__":
    n = 2
    rows = kit.spawn(timing, n)[0]
    factor = 2 * (n - 1) / n
    print(f"{'bytes':>10} | {'minidp ring':^26} | {'torch gloo':^26}")
    print(
        f"{'':>10} | {'time':>8} {'algbw':>8} {'busbw':>8} | {'time':>8} {'algbw':>8} {'busbw':>8}"
    )
    for nbytes, best in rows.items():
        cells = []
        for name in ("minidp ring", "torch gloo"):
            t = best[name]
            alg = nbytes / t / 1e9
            cells.append(f"{t * 1e6:>6.0f}us {alg:>6.2f}GB {alg * factor:>6.2f}GB")
        print(f"{nbytes:>10} | " + " | ".join(cells))
    print(f"(GB = GB/s; n={n} ranks, so busbw = algbw; {kit.machine()})")
    print(
        "small tensors: latency-bound — minidp pays Python per message plus its header check;\n"
        "large tensors: both approach what loopback TCP between two processes can carry."
    )

# %% [markdown]
# ## Checks

# %%
if __name__ == "__main__":
    kit.check_true("the replayed steps end at torch.distributed.all_reduce's result", run.equal)
    kit.check_true(
        "after reduce-scatter each rank owns exactly one finished chunk, all different",
        sorted(c for cs in owned for c in cs) == [0, 1, 2, 3] and all(len(c) == 1 for c in owned),
    )
    for n, res in measured.items():
        # rank r sends every chunk but its own in reduce-scatter and every chunk but one
        # in all-gather: exactly 2(n-1)/n*S when the chunks are equal; gloo's layout rounds
        # chunks to whole segments, so a rank may be a few bytes off — the total is exact.
        sent = [r["ring"][0] for r in res]
        kit.check_true(
            f"n={n}: ring ranks send 2(n-1)*S = {2 * (n - 1) * S:,} bytes in total, each "
            f"within 0.1% of 2(n-1)/n*S, in at least 2(n-1) = {2 * (n - 1)} messages",
            sum(sent) == 2 * (n - 1) * S
            and all(abs(b - 2 * (n - 1) * S / n) <= 1e-3 * S for b in sent)
            and all(r["ring"][1] >= 2 * (n - 1) for r in res),
            f"per rank: {sent}",
        )
    for (n, numel), res in exact.items():
        kit.check(
            f"n={n}, numel={numel}: minidp ring_all_reduce vs torch.distributed.all_reduce",
            [r["ours"] for r in res],
            [r["theirs"] for r in res],
            exact=True,
        )
        kit.check(
            f"n={n}, numel={numel}: the book's ring vs gloo (same sum, other rounding)",
            [r["textbook"] for r in res],
            [r["theirs"] for r in res],
            exact=False,
        )
    for (n, dtype), res in textbook_runs.items():
        # integers: any order gives the same sum; n=2: one addition per element, and
        # a + b == b + a. Otherwise the chunks are cut and summed in another order than
        # gloo's: equal to within float32 rounding of sums of 4 values of |x| < ~16.
        exact = n == 2 or not dtype.is_floating_point
        kit.check(
            f"textbook.ring_all_reduce, n={n} {dtype} vs torch.distributed.all_reduce",
            [r["ours"] for r in res],
            [r["theirs"] for r in res],
            exact=exact,
            rtol=1e-6,
            atol=1e-5,
        )
    kit.done()

# %% [markdown]
# ## Your turn
# Write the ring yourself in `lessons/exercises/ring_all_reduce.py` (and its first half in
# `reduce_scatter.py`), then check it against `torch.distributed.all_reduce` on worlds of
# 1 to 5 ranks: `python -m minidp exercise check ring_all_reduce` (`... reduce_scatter`).

# %%
if __name__ == "__main__":
    print("\nExercises: edit the stubs in lessons/exercises/, then check them against torch:")
    print("  python -m minidp exercise check ring_all_reduce")
    print("  python -m minidp exercise check reduce_scatter")
