"""Record the communication scenes for real: a ring all-reduce, and server vs ring bytes.

    python -m minidp classroom --no-serve --only ring,traffic --out /tmp/cls

Ring: ``world`` thread-ranks, each with its own real gloo group, run minidp's
``ring_all_reduce`` (textbook layout: one message per chunk) through a *tapped* group
(``minidp.trace.tap``) that logs every message with a copy of its payload and the time it
was posted. Nothing is recomputed here: what every rank holds after step k is read from
the messages themselves (a reduce-scatter partial sum is the payload the receiver sends
next; an all-gather chunk is copied as is), then checked against the ring's result and
against ``torch.distributed.all_reduce`` on the same inputs.

Traffic: the parameter server (``naive_all_reduce``) and the ring on the same tensor; the
page counts bytes per link from the library's own ``send`` events (rank, peer, bytes).

Each scene becomes trace events on the ``classroom`` lane, so the page is built from one
Chrome trace. Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minidp import trace
from minidp.comm import group as groups
from minidp.comm import naive_all_reduce, ring_all_reduce
from minidp.comm.ring import textbook_layout
from minidp.demo.ring import readable_inputs
from minidp.launch import run_threads

LANE = "classroom"  # scene events live on their own lane of each rank's track


def _ints(t: torch.Tensor) -> list:
    return t.tolist()


def _ring_rank(rank: int, world: int, inputs: list[torch.Tensor], log: trace.MessageLog):
    x = inputs[rank].clone()
    g = trace.tap(groups.resolve(), log, watch=x)
    ring_all_reduce(x, "sum", group=g, layout="textbook")
    ref = inputs[rank].clone()
    dist.all_reduce(ref, group=groups.resolve())  # the official collective, same inputs
    return x, ref


def ring_events(world: int, numel: int) -> list[dict]:
    """Run the ring on ``world`` thread-ranks; events: inputs, one span per rank per step."""
    if world < 2:
        raise ValueError(f"classroom ring: --world-size must be at least 2, got {world}")
    if numel < world:
        raise ValueError(
            f"classroom ring: --numel ({numel}) must be at least --world-size ({world}) so "
            "every rank owns a chunk"
        )
    inputs = readable_inputs(world, numel)
    log = trace.MessageLog()
    with trace.recording() as rec:
        results = run_threads(_ring_rank, world, inputs, log, timeout=60.0)
    chunks, _ = textbook_layout(numel, world)
    chunk_at = {lo: c for c, (lo, _) in enumerate(chunks)}
    sends = {r: log.sends(src=r) for r in range(world)}  # data messages, posting order
    steps = 2 * (world - 1)
    if any(len(sends[r]) != steps for r in range(world)):
        raise RuntimeError("classroom ring: expected one chunk message per rank per step")
    end = max(m.ts for m in log.messages)
    events = [e for e in rec.events if e["name"] in ("send", "recv")]
    state = [[v.clone() for v in (x[lo:hi] for lo, hi in chunks)] for x in inputs]
    common = {"lane": LANE, "world": world, "chunks": chunks}
    for r in range(world):
        holds = [_ints(v) for v in state[r]]
        events.append(_instant("ring inputs", sends[r][0].ts, r, **common, holds=holds))
    for k in range(steps):
        phase = "reduce-scatter" if k < world - 1 else "all-gather"
        moves = []
        for src in range(world):
            m = sends[src][k]
            chunk = chunk_at[m.offset]
            # the receiver's new value: the payload itself (all-gather), or the partial sum
            # it forwards at its next send (reduce-scatter) — read, not recomputed
            new = m.payload if phase == "all-gather" else sends[m.dst][k + 1].payload
            moves.append((src, m.dst, chunk, m.payload, m.ts))
            state[m.dst][chunk] = new.clone()
        for src, dst, chunk, payload, ts in moves:
            stop = sends[src][k + 1].ts if k + 1 < steps else end
            events.append(
                {
                    "name": "ring step",
                    "ph": "X",
                    "ts": ts,
                    "dur": max(stop - ts, 0.001),
                    "pid": src,
                    "tid": LANE,
                    "args": {
                        "step": k + 1,
                        "phase": phase,
                        "to": dst,
                        "chunk": chunk,
                        "values": _ints(payload),
                        "holds": [_ints(v) for v in state[src]],
                    },
                }
            )
    outputs, refs = [r[0] for r in results], [r[1] for r in results]
    replayed = [torch.cat(row) for row in state]
    if not all(torch.equal(a, b) for a, b in zip(replayed, outputs)):
        raise RuntimeError("classroom ring: the replayed steps do not end at the ring's result")
    equal = all(torch.equal(a, b) for a, b in zip(outputs, refs))
    for r in range(world):
        events.append(_instant("ring result", end, r, result=_ints(outputs[r]), torch_equal=equal))
    return events


def _instant(name: str, ts: float, rank: int, lane: str = LANE, **args) -> dict:
    return {"name": name, "ph": "i", "s": "t", "ts": ts, "pid": rank, "tid": lane, "args": args}


def _traffic_rank(rank: int, world: int, numel: int) -> None:
    for name, fn in (("parameter server", naive_all_reduce), ("ring", ring_all_reduce)):
        x = torch.ones(numel)
        dist.barrier(group=groups.resolve())  # the two algorithms do not interleave in time
        with trace.span(f"all-reduce: {name}", lane=LANE, bytes=numel * 4, algorithm=name):
            fn(x)


def traffic_events(world: int, numel: int) -> list[dict]:
    """Parameter server, then ring, on ``world`` thread-ranks: their spans and sends."""
    if world < 2:
        raise ValueError(f"classroom traffic: --world-size must be at least 2, got {world}")
    with trace.recording() as rec:
        run_threads(_traffic_rank, world, numel, timeout=60.0)
    return [e for e in rec.events if e["name"] == "send" or e["tid"] == LANE]
