"""Classroom demo: one DistributedDataParallel step, hook by hook, bucket by bucket.

    python -m minidp demo ddp                         # 2 rank processes
    python -m minidp demo ddp --world-size 3
    python -m minidp demo ddp --trace ddp.json        # also a Chrome trace (Perfetto)

Printed from the recorder's events (``minidp.tools.recorder.ddp``, which
``ddp_timeline.png`` and the classroom show too), once, by the launcher, with ``rank r:``
where ranks differ: 1. the constructor broadcasting rank 0's parameters (the ranks started
different); 2. the bucket layout — one bucket in the first iteration, then the rebuild in
the order gradients arrived; 3. the second step's backward on rank 0 in time order: hooks
firing from the last layer back, bucket launches, the all-reduces on the communication
thread while backward continues, and how much of them overlapped it (little, on a CPU);
4. a gradient before (per rank) and after averaging; 5. ``torch.equal`` on every parameter
against ``torch.nn.parallel.DistributedDataParallel`` trained the same way.

Test: ``pytest tests/test_ddp_misc.py -k demo``
"""

from __future__ import annotations

import argparse

import torch

from minidp import trace
from minidp.comm.direct import small_bytes
from minidp.launch import ProcessWorld
from minidp.tools.recorder import mlp
from minidp.tools.recorder.ddp import ddp_events, in_step

# Big enough that each layer's backward takes milliseconds: the all-reduce of the last
# layers then visibly runs while the first layers are still being differentiated.
SIZES = (256, 256, 256, 256, 10)


def _layout(event: dict, shapes: dict) -> list[list[tuple[str, tuple, int]]]:
    """A ``ddp buckets`` event's layout: per bucket, (name, shape, bytes) per parameter."""
    return [[(n, shapes[n], 4 * torch.Size(shapes[n]).numel()) for n in b["params"]]
            for b in event["args"]["buckets"]]  # fmt: skip


def _print_layout(layout, indent="    ") -> None:
    for b, params in enumerate(layout):
        total = sum(n for _, _, n in params)
        print(f"{indent}bucket {b} ({_size(total)}):")
        line = ""
        for name, shape, n in params:  # wrap between parameters, never inside one
            item = f"{name} {shape} {_size(n)}"
            if line and len(line) + len(item) > 80:
                print(f"{indent}  {line.rstrip()}")
                line = ""
            line += ("| " if line else "") + item + " "
        print(f"{indent}  {line.rstrip()}")


def _print_events(events: list[dict], shapes: dict) -> None:
    rows = []
    for e in events:
        name, a = e["name"], e.get("args", {})
        if name == "grad ready":
            rows.append((e["ts"], f"grad ready   {a['param']} {shapes.get(a['param'], '')}"))
        elif name == "bucket launch":
            rows.append((e["ts"], f"  -> launch bucket {a['bucket']} ({_size(a['bytes'])})"))
        elif name.startswith("all-reduce bucket"):
            b = name.split()[-1]
            rows.append((e["ts"], f"{'':30}comm thread: all-reduce bucket {b} starts"))
            rows.append((e["ts"] + e["dur"], f"{'':30}comm thread: all-reduce bucket {b} done"))
        elif name == "wait for buckets":
            rows.append((e["ts"], "last bucket launched: wait for all, write .grad"))
    t0 = min(ts for ts, _ in rows)
    for ts, text in sorted(rows, key=lambda r: r[0]):
        print(f"    {(ts - t0) / 1000:7.2f} ms  {text}")


def overlap_ms(events: list[dict]) -> tuple[float, float]:
    """(ms of all-reduce that ran before backward ended, ms of all-reduce in total).

    Backward ends when the last bucket is launched ("wait for buckets"); whatever
    all-reduce time falls before that instant overlapped with computing gradients.
    """
    end = next(e["ts"] for e in events if e["name"] == "wait for buckets")
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("all-reduce")]
    during = sum(max(0.0, min(stop, end) - start) for start, stop in spans)
    return during / 1000, sum(stop - start for start, stop in spans) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minidp demo ddp", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--world-size", type=int, default=2, help="rank processes to start (default: 2)"
    )
    parser.add_argument(
        "--bucket-cap-mb", type=float, default=0.25, help="0.25: one bucket per layer"
    )
    parser.add_argument("--trace", help="save every rank's events as a Chrome trace JSON")
    args = parser.parse_args(argv)
    w, cap = args.world_size, args.bucket_cap_mb
    model = mlp(*SIZES)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    n = sum(p.numel() for p in model.parameters())
    print(f"minidp DDP: one training step on {w} ranks (processes, gloo on CPU)")
    print(f"model: {model}\n{len(shapes)} parameter tensors, {n} elements\n")
    with ProcessWorld(w) as world:  # step 0 fills one bucket; step 1 runs on the rebuilt ones
        events = ddp_events(world, SIZES, cap, batch=1024, record=(0, 1), lr=0.1, spread=0.1,
                            check=True)  # fmt: skip
    res = sorted((e for e in events if e["name"] == "ddp check"), key=lambda e: e["pid"])
    res = [e["args"] for e in res]
    layouts = [e for e in events if e["name"] == "ddp buckets" and e["pid"] == 0]
    layout1, layout2 = (_layout(e, shapes) for e in sorted(layouts, key=lambda e: e["ts"]))
    step2 = in_step(events, 0, 1)

    print("1. construction broadcasts rank 0's parameters (ranks started different):")
    for r, o in enumerate(res):
        note = "kept (it is the source)" if r == 0 else "now rank 0's value"
        print(f"   rank {r}: 0.weight[0, 0] = {o['before']:+.4f} -> {o['after']:+.4f}  {note}")

    print(f"\n2. buckets (cap {cap} MiB = {int(cap * 2**20)} B)")
    print("   first iteration: ONE bucket, parameters in forward order — the order in which")
    print("   gradients really arrive is not known yet:")
    _print_layout(layout1)
    print("   rebuilt at the 2nd forward, in the order gradients arrived (last layer first),")
    print("   closing a bucket once it reaches the cap; rank 0's layout is broadcast:")
    _print_layout(layout2)

    print("\n3. step 2's backward on rank 0 (hooks on the autograd thread, all-reduces on")
    print("   the communication thread; a bucket launches only after every lower one):")
    _print_events(step2, shapes)
    during, total = overlap_ms(step2)
    print(f"   {during:.1f} of {total:.1f} ms of all-reduce ran while backward was still running.")
    print("   On this CPU that saves little: the ranks, their communication threads and gloo's")
    print("   memory copies share the same few cores as backward itself, so communicating")
    print("   takes cores away from computing. On GPUs the all-reduce runs on the network and")
    print("   the GPU's copy engines, beside the compute — there overlap hides it.")

    print("\n4. gradient of 6.bias[:4]: each rank's own, then the average every rank holds")
    for r, o in enumerate(res):
        print(f"   rank {r}: local {_fmt(o['local_grad'])}")
    print(f"   all ranks after backward: {_fmt(res[0]['avg_grad'])}")
    mean = torch.tensor([o["local_grad"] for o in res]).mean(0)
    same = all(o["avg_grad"] == res[0]["avg_grad"] for o in res)
    print(f"   identical on every rank: {same}; mean of the locals: {_fmt(mean)}")
    # all_reduce's "auto" picks its path by size: say which one these buckets took
    limit = small_bytes(w)  # 1 MiB at 2 ranks, 256 KiB from 3 on
    big = [sum(n for _, _, n in b) > limit for b in layout2]
    kib = limit // 1024
    if all(big):
        via = f"round the ring: every bucket is over {kib} KiB"
    elif not any(big):
        via = f"in one direct exchange: no bucket is over {kib} KiB"
    else:
        via = f"round the ring if over {kib} KiB, else in one direct exchange"
    print("   (each gradient is multiplied by 1/world_size while copied into its bucket,")
    print(f"   then the bucket is summed {via})")

    equal = [all(o["torch_equal"]) for o in res]
    print("\n5. parity: the same 2 steps through torch.nn.parallel.DistributedDataParallel;")
    print(f"   torch.equal on all {len(shapes)} parameters, per rank: {equal}")
    if args.trace:
        path = trace.save(args.trace, events)
        print(f"\ntrace saved: {path} (open in https://ui.perfetto.dev)")
    return 0 if all(equal) else 1


def _size(n: int) -> str:
    return f"{n} B" if n < 4096 else f"{n / 1024:.0f} KiB"


def _fmt(values) -> str:
    return "[" + ", ".join(f"{v:+.5f}" for v in torch.as_tensor(values).tolist()) + "]"
