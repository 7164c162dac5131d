"""Record what crosses the links: the book's ring step by step, server vs ring, α and β.

    python -m minidp demo ring                       # the ring's events, printed
    python -m minidp diagrams --only ring traffic
    python -m minidp classroom --no-serve --only ring,traffic --out /tmp/cls

Ring (:func:`ring_events`): every rank runs the book's ``ring_all_reduce`` (what lesson 8
prints) through a tapped group (``minidp.trace.tap``) that logs every message and its
payload. Nothing is recomputed: what each rank holds after step k is read from the
messages (a partial sum is the payload its receiver sends next; an all-gather chunk is
copied), then checked against the result and ``torch.distributed.all_reduce``. Events:
``ring inputs``, ``ring step`` (per rank and step: the chunk sent, to whom, its values,
what the rank then holds; from posting it to that step's receive), ``ring result`` (with
torch's, and ``count_traffic``'s bytes). The inputs' sums stay readable: rank r holds
multiples of ``10**(d·r)``, so the digit group r of any sum says whether rank r is in it.

Traffic (:func:`traffic_events`): the engine's parameter server, then its ring, through a
tapped group; every message a ``traffic message`` (peer, bytes, step, and whether it is
minidp's header check rather than data). Link (:func:`link_events`): lesson 6's ping-pong
between ranks 0 and 1 and its fit — α the smallest message's one-way time, β the extra bytes
of the largest over its extra time — which the classroom's models use.

Test: ``pytest tests/test_demo_ring.py tests/test_classroom.py``
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from minidp import comm, trace
from minidp.comm import count_traffic, p2p
from minidp.comm import group as groups
from minidp.comm.headers import HEADER_TAG
from minidp.textbook.collectives import ring_all_reduce
from minidp.tools.recorder import LANE, instant, own


def digits_per_rank(world: int, numel: int) -> int | None:
    """Digits each rank gets in the readable inputs, or None when they would not fit int64."""
    d = len(str(numel))
    return d if world <= 6 and world * d <= 18 else None


def readable_inputs(world: int, numel: int) -> list[torch.Tensor]:
    """Element i of rank r is ``(i + 1) * 10**(d * r)``: every element differs from every
    other (no chunk repeats another), and in any partial sum the d-digit group r reads
    ``i + 1`` if rank r's piece is in it, else zeros."""
    i = torch.arange(numel, dtype=torch.int64)
    d = digits_per_rank(world, numel)
    if d:
        return [(i + 1) * 10 ** (d * r) for r in range(world)]
    return [r * 100 + i + 1 for r in range(world)]  # too many digits for int64: just distinct


def chunk_bounds(numel: int, world: int) -> list[tuple[int, int]]:
    """The book's chunks, ``[lo, hi)`` each: ``tensor_split``'s (the first ``numel % world``
    one longer), the cut its ring makes."""
    return [(int(c[0]), int(c[-1]) + 1) for c in torch.arange(numel).tensor_split(world)]


def _ring_rank(rank: int, world: int, inputs: list[torch.Tensor]):
    x = inputs[rank].clone()
    log = trace.MessageLog()
    g = trace.tap(groups.resolve(), log, watch=x)
    with trace.recording() as rec, count_traffic() as counted:
        ring_all_reduce(x, "sum", group=g)
    ref = inputs[rank].clone()
    dist.all_reduce(ref, group=groups.resolve())  # the official collective, same inputs
    return x, ref, log.messages, own(rec.events, rank, skip=()), counted.sent_bytes


def ring_events(world, numel: int) -> list[dict]:
    """Run the book's ring on ``world`` (see the package); events: inputs, every step, result."""
    n = world.world_size
    if n < 2 or numel < n:
        raise ValueError(
            f"ring: expected at least 2 ranks and --numel >= --world-size so every rank owns a "
            f"chunk, got {n} ranks and numel {numel}"
        )
    inputs = readable_inputs(n, numel)
    results = world.run(_ring_rank, inputs, timeout=120.0)
    log = trace.MessageLog()
    events: list[dict] = []
    for _, _, messages, mine, _ in results:
        log.messages += messages
        events += mine
    chunks = chunk_bounds(numel, n)
    chunk_at = {lo: c for c, (lo, _) in enumerate(chunks)}
    sends = {r: log.sends(src=r) for r in range(n)}  # data messages, posting order
    steps = 2 * (n - 1)
    if any(len(sends[r]) != steps for r in range(n)):
        raise RuntimeError("ring: expected one chunk message per rank per step")
    # a step ends on a rank when its receive of that step has completed (the library's
    # "recv" events: the book's ring makes exactly one per step)
    done = {r: sorted(e["ts"] for e in events if e["name"] == "recv" and e["pid"] == r)[-steps:]
            for r in range(n)}  # fmt: skip
    end = max(m.ts for m in log.messages)
    state = [[x[lo:hi].clone() for lo, hi in chunks] for x in inputs]
    common = {"world": n, "chunks": chunks, "digits": digits_per_rank(n, numel)}
    for r in range(n):
        holds = [v.tolist() for v in state[r]]
        events.append(instant("ring inputs", sends[r][0].ts, r, **common, holds=holds))
    for k in range(steps):
        phase = "reduce-scatter" if k < n - 1 else "all-gather"
        moves = []
        for src in range(n):
            m = sends[src][k]
            chunk = chunk_at[m.offset]
            new = m.payload  # all-gather: the chunk is copied as is
            if phase == "reduce-scatter":  # the partial sum the receiver forwards next
                new = sends[m.dst][k + 1].payload
                if chunk_at[sends[m.dst][k + 1].offset] != chunk:
                    raise RuntimeError(
                        f"ring: rank {m.dst} received chunk {chunk} at step {k + 1} but did not "
                        "forward the partial sum it made (is the book's ring broken?)"
                    )
            moves.append((src, m))
            state[m.dst][chunk] = new.clone()
        for src, m in moves:
            args = {"step": k + 1, "phase": phase, "to": m.dst, "chunk": chunk_at[m.offset],
                    "bytes": m.nbytes, "values": m.payload.tolist(),
                    "holds": [v.tolist() for v in state[src]]}  # fmt: skip
            stop = done[src][k] if len(done[src]) == steps else end
            events.append({"name": "ring step", "ph": "X", "ts": m.ts,
                           "dur": max(stop - m.ts, 0.001), "pid": src, "tid": LANE,
                           "args": args})  # fmt: skip
    outputs = [r[0] for r in results]
    if not all(torch.equal(torch.cat(row), out) for row, out in zip(state, outputs)):
        raise RuntimeError("ring: the replayed steps do not end at the ring's result")
    equal = all(torch.equal(r[0], r[1]) for r in results)
    for r, (x, ref, _, _, sent) in enumerate(results):
        events.append(instant("ring result", end, r, result=x.tolist(), torch_equal=equal,
                              torch=ref.tolist(), sent_bytes=sent))  # fmt: skip
    return events


# ---- server vs ring, and the link: the engine's messages ---------------------------------

SIZES = (8, 64, 512, 4096, 32768, 262144, 1048576)  # bytes per ping-pong message
REPEATS = 7  # round trips per size; the best one counts (the least disturbed)


def _step(algorithm: str, rank: int, data_index: int) -> int:
    """Which step of its algorithm a data message is: the server gathers (1), then sends
    the sum back (2); a ring rank's k-th message is step k + 1 (one per step)."""
    if algorithm == "parameter server":
        return 2 if rank == 0 else 1
    return data_index + 1


def _traffic_rank(rank: int, world: int, numel: int) -> list[dict]:
    events = []
    for name, fn in (("parameter server", comm.naive_all_reduce), ("ring", comm.ring_all_reduce)):
        x = torch.ones(numel)
        log = trace.MessageLog()
        g = trace.tap(groups.resolve(), log, watch=x, copy=False)
        dist.barrier(group=groups.resolve())  # the two algorithms do not interleave in time
        with trace.recording() as rec:
            with trace.span(f"all-reduce: {name}", lane=LANE, bytes=numel * 4, algorithm=name):
                fn(x, group=g)
        events += [e for e in rec.events if e["tid"] == LANE and e["pid"] == rank]
        data = 0
        for m in log.sends(watched=False):  # this rank's sends, in posting order
            header = m.tag >= HEADER_TAG  # minidp's check before the collective, not data
            step = 0 if header else _step(name, rank, data)
            data += not header
            events.append(instant("traffic message", m.ts, rank, algorithm=name, to=m.dst,
                                  bytes=m.nbytes, step=step, header=header))  # fmt: skip
    return events


def traffic_events(world, numel: int) -> list[dict]:
    """Parameter server, then ring, on ``world``: their spans and every message."""
    return [e for r in world.run(_traffic_rank, numel, timeout=120.0) for e in r]


def _round_trip(rank: int, buf: torch.Tensor, g) -> float:
    """Rank 0 sends ``buf`` to rank 1 and gets it back; the seconds it took."""
    t0 = time.perf_counter()
    for send in (rank == 0, rank != 0):
        (p2p.send if send else p2p.recv)(buf, 1 - rank, g)
    return time.perf_counter() - t0


def _ping_pong(rank: int, world: int) -> list[tuple[int, float]] | None:
    g = groups.resolve()
    samples = []
    if rank < 2:  # one untimed round trip first: the pair's first message pays for its setup
        _round_trip(rank, torch.zeros(2), g)
    for nbytes in SIZES:
        buf = torch.zeros(nbytes // 4)
        dist.barrier(group=g)
        if rank < 2:
            best = min(_round_trip(rank, buf, g) for _ in range(REPEATS))
            samples.append((nbytes, best / 2 * 1e6))  # one way, microseconds
    dist.barrier(group=g)
    return samples if rank == 0 else None


def fit(samples: list[tuple[int, float]]) -> tuple[float, float | None]:
    """Lesson 6's fit: (α in µs, β in bytes per µs), β None when the largest message took
    no longer than the smallest (noise: no bandwidth to read)."""
    small, big = min(samples), max(samples)
    alpha = small[1]
    extra = big[1] - alpha
    return alpha, ((big[0] - small[0]) / extra if extra > 0 else None)


def link_events(world) -> list[dict]:
    """One ``link alpha-beta`` event on rank 0: the samples and lesson 6's fit of them."""
    samples = world.run(_ping_pong, timeout=120.0)[0]
    alpha, beta = fit(samples)
    between = f"rank processes 0 and 1 of {world.world_size}, gloo"
    return [instant("link alpha-beta", trace.now_us(), 0, samples=samples, alpha_us=alpha,
                    beta_bytes_per_us=beta, between=between, repeats=REPEATS,
                    cpus=os.cpu_count())]  # fmt: skip
