"""Record the communication scenes for real: a ring all-reduce, and server vs ring bytes.

    python -m minidp classroom --no-serve --only ring,traffic --out /tmp/cls

Both run in rank *processes* (``minidp.launch.ProcessWorld``): their timelines are what
one process per rank does, not threads taking turns on one interpreter.

Ring: every rank runs the book's ``ring_all_reduce`` (``minidp.textbook.collectives``, the
page lesson 8 prints: one message per chunk, rank r sends to r-1) through a *tapped* group
(``minidp.trace.tap``) that logs every message with a copy of its payload and the time it
was posted; the logs come back to this process. Nothing is
recomputed here: what every rank holds after step k is read from the messages themselves
(a reduce-scatter partial sum is the payload the receiver sends next; an all-gather chunk
is copied as is), then checked against the ring's result and against
``torch.distributed.all_reduce`` on the same inputs.

Traffic: the engine's parameter server (``minidp.comm.naive_all_reduce``), then its ring, on
the same tensor, each through a tapped group (the engine's: its header check is part of
what this scene counts). Every message becomes a ``traffic message`` event: sender,
receiver, bytes, the algorithm's step it belongs to, and whether it is minidp's header
check before the collective (its tag says so) rather than the algorithm's data.

A rank's step k lasts from posting its k-th chunk to the completion of its k-th receive
(the library's own ``recv`` event). Each scene becomes trace events on the ``classroom``
lane, so the page is built from one Chrome trace. Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minidp import trace
from minidp.comm import group as groups
from minidp.comm import naive_all_reduce, ring_all_reduce
from minidp.comm.headers import HEADER_TAG
from minidp.textbook import collectives as book
from minidp.tools.demo.ring import digits_per_rank, readable_inputs

LANE = "classroom"  # scene events live on their own lane of each rank's track


def _ints(t: torch.Tensor) -> list:
    return t.tolist()


def _ring_rank(rank: int, world: int, inputs: list[torch.Tensor]):
    x = inputs[rank].clone()
    log = trace.MessageLog()
    g = trace.tap(groups.resolve(), log, watch=x)
    with trace.recording() as rec:
        book.ring_all_reduce(x, "sum", group=g)
    ref = inputs[rank].clone()
    dist.all_reduce(ref, group=groups.resolve())  # the official collective, same inputs
    mine = [e for e in rec.events if e["name"] in ("send", "recv")]
    return x, ref, log.messages, mine


def chunk_bounds(numel: int, world: int) -> list[tuple[int, int]]:
    """The book's chunks, ``[lo, hi)`` each: ``tensor_split``'s (the first ``numel % world``
    one longer), the cut its ring makes."""
    sizes = [len(c) for c in torch.empty(numel).tensor_split(world)]
    ends = [sum(sizes[: c + 1]) for c in range(world)]
    return [(end - size, end) for size, end in zip(sizes, ends)]


def ring_events(world, numel: int) -> list[dict]:
    """Run the ring on ``world`` (a ProcessWorld); events: inputs, one span per rank per step."""
    n = world.world_size
    if numel < n:
        raise ValueError(
            f"classroom ring: --numel ({numel}) must be at least --world-size ({n}) so "
            "every rank owns a chunk"
        )
    inputs = readable_inputs(n, numel)
    results = world.run(_ring_rank, inputs, timeout=120.0)
    log = trace.MessageLog()
    events: list[dict] = []
    for _, _, messages, mine in results:
        log.messages += messages
        events += mine
    chunks = chunk_bounds(numel, n)
    chunk_at = {lo: c for c, (lo, _) in enumerate(chunks)}
    sends = {r: log.sends(src=r) for r in range(n)}  # data messages, posting order
    steps = 2 * (n - 1)
    if any(len(sends[r]) != steps for r in range(n)):
        raise RuntimeError("classroom ring: expected one chunk message per rank per step")
    end = max(m.ts for m in log.messages)
    # a step ends on a rank when its receive of that step has completed (the library's
    # "recv" events: the book's ring makes exactly one per step)
    done = {r: sorted(e["ts"] for e in events if e["name"] == "recv" and e["pid"] == r)[-steps:]
            for r in range(n)}  # fmt: skip
    state = [[v.clone() for v in (x[lo:hi] for lo, hi in chunks)] for x in inputs]
    common = {"lane": LANE, "world": n, "chunks": chunks, "digits": digits_per_rank(n, numel)}
    for r in range(n):
        holds = [_ints(v) for v in state[r]]
        events.append(_instant("ring inputs", sends[r][0].ts, r, **common, holds=holds))
    for k in range(steps):
        phase = "reduce-scatter" if k < n - 1 else "all-gather"
        moves = []
        for src in range(n):
            m = sends[src][k]
            chunk = chunk_at[m.offset]
            # the receiver's new value: the payload itself (all-gather), or the partial sum
            # it forwards at its next send (reduce-scatter) — read, not recomputed
            new = m.payload if phase == "all-gather" else sends[m.dst][k + 1].payload
            moves.append((src, m.dst, chunk, m.payload, m.ts, m.nbytes))
            state[m.dst][chunk] = new.clone()
        for src, dst, chunk, payload, ts, nbytes in moves:
            stop = done[src][k] if len(done[src]) == steps else end
            args = {"step": k + 1, "phase": phase, "to": dst, "chunk": chunk, "bytes": nbytes,
                    "values": _ints(payload), "holds": [_ints(v) for v in state[src]]}  # fmt: skip
            events.append({"name": "ring step", "ph": "X", "ts": ts, "dur": max(stop - ts, 0.001),
                           "pid": src, "tid": LANE, "args": args})  # fmt: skip
    outputs, refs = [r[0] for r in results], [r[1] for r in results]
    replayed = [torch.cat(row) for row in state]
    if not all(torch.equal(a, b) for a, b in zip(replayed, outputs)):
        raise RuntimeError("classroom ring: the replayed steps do not end at the ring's result")
    equal = all(torch.equal(a, b) for a, b in zip(outputs, refs))
    for r in range(n):
        events.append(_instant("ring result", end, r, result=_ints(outputs[r]), torch_equal=equal))
    return events


def _instant(name: str, ts: float, rank: int, lane: str = LANE, **args) -> dict:
    return {"name": name, "ph": "i", "s": "t", "ts": ts, "pid": rank, "tid": lane, "args": args}


def _step(algorithm: str, rank: int, data_index: int) -> int:
    """Which step of its algorithm a data message is: the server gathers (1), then sends
    the sum back (2); a ring rank's k-th message is step k + 1 (one per step)."""
    if algorithm == "parameter server":
        return 2 if rank == 0 else 1
    return data_index + 1


def _traffic_rank(rank: int, world: int, numel: int) -> list[dict]:
    events = []
    for name, fn in (("parameter server", naive_all_reduce), ("ring", ring_all_reduce)):
        x = torch.ones(numel)
        log = trace.MessageLog()
        g = trace.tap(groups.resolve(), log, watch=x, copy=False)
        dist.barrier(group=groups.resolve())  # the two algorithms do not interleave in time
        with trace.recording() as rec:
            with trace.span(f"all-reduce: {name}", lane=LANE, bytes=numel * 4, algorithm=name):
                fn(x, group=g)
        events += [e for e in rec.events if e["tid"] == LANE]
        data = 0
        for m in log.sends(watched=False):  # this rank's sends, in posting order
            header = m.tag >= HEADER_TAG  # minidp's check before the collective, not data
            step = 0 if header else _step(name, rank, data)
            data += not header
            events.append(_instant("traffic message", m.ts, rank, algorithm=name, to=m.dst,
                                   bytes=m.nbytes, step=step, header=header))  # fmt: skip
    return events


def traffic_events(world, numel: int) -> list[dict]:
    """Parameter server, then ring, on ``world`` (a ProcessWorld): spans and every message."""
    return [e for r in world.run(_traffic_rank, numel, timeout=120.0) for e in r]
