"""Classroom demo: ring all-reduce, step by step, on real ranks.

    python -m minidp demo ring --world-size 4 --numel 8
    python -m minidp demo ring --step            # wait for Enter between steps
    python -m minidp demo ring --trace ring.json # also save a Chrome trace (Perfetto)

What happens: ``world-size`` ranks start as threads of this process, each with its own
real gloo process group. Each rank runs the book's ``ring_all_reduce``
(``minidp.textbook.collectives``: the page lesson 8 prints; one chunk per rank, one
message per chunk) through a *tapped* group that logs every message with a copy of its
payload (``minidp.trace.tap``). The demo does not compute the ring itself: it replays the
log — who sent which chunk to whom at each step, and what each rank then held — and draws
a grid per step (rank x chunk).

Inputs are integers chosen so that sums stay readable: with up to 6 ranks, rank ``r``
holds multiples of ``10**r``, so in any partial sum the digit at position ``r`` (from the
right) says whether rank ``r``'s piece is in it: 1011 = ranks 0, 1 and 3.

It ends by running ``torch.distributed.all_reduce`` (gloo) on the same inputs and
checking ``torch.equal`` on every rank.

This file runs the ranks and replays their log into steps (``record_ring``) and holds
the command line; ``ring_run.py`` holds what a run is made of, ``ring_view.py`` draws it.

Colour: on when stdout is a terminal and NO_COLOR is unset (``--color always|never``).

Test: ``pytest tests/test_demo_ring.py``
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist

from minidp import trace
from minidp.comm import count_traffic
from minidp.comm import group as groups
from minidp.launch import run_threads
from minidp.textbook.collectives import ring_all_reduce
from minidp.tools.demo.ring_run import (
    ALL_GATHER,
    REDUCE_SCATTER,
    Move,
    RingRun,
    Step,
    chunk_grid,
    digits_per_rank,
)
from minidp.tools.demo.ring_view import Style, render_intro, render_step, render_summary

CLEAR_SCREEN = "\033[2J\033[H"  # ANSI: clear, cursor home


def readable_inputs(world: int, numel: int) -> list[torch.Tensor]:
    """Integer inputs whose sums show who contributed (see the module docstring).

    Element i of rank r is ``(i + 1) * 10**(d * r)``, ``d`` = the digits of ``numel``: every
    element differs from every other (no chunk repeats another), and in any partial sum the
    d-digit group r reads ``i + 1`` if rank r's piece is in it, else zeros.
    """
    i = torch.arange(numel, dtype=torch.int64)
    d = digits_per_rank(world, numel)
    if d:
        return [(i + 1) * 10 ** (d * r) for r in range(world)]
    return [r * 100 + i + 1 for r in range(world)]  # too many digits for int64: just distinct


def _rank_main(rank: int, world: int, inputs: list[torch.Tensor], log: trace.MessageLog):
    x = inputs[rank].clone()
    g = trace.tap(groups.resolve(), log, watch=x)
    with count_traffic() as counted:
        ring_all_reduce(x, "sum", group=g)
    ref = inputs[rank].clone()
    dist.all_reduce(ref, group=groups.resolve())  # the official collective, same inputs
    return x, ref, counted.sent_bytes


def record_ring(world: int, numel: int, inputs: list[torch.Tensor] | None = None) -> RingRun:
    """Run a real ring all-reduce on ``world`` thread-ranks and replay its messages as steps."""
    if world < 2:
        raise ValueError(f"record_ring: need at least 2 ranks to form a ring, got {world}")
    if numel < world:
        raise ValueError(
            f"record_ring: need numel >= world size ({world}) so every rank owns a chunk, "
            f"got numel={numel}"
        )
    inputs = readable_inputs(world, numel) if inputs is None else inputs
    log = trace.MessageLog()
    with trace.recording() as rec:
        results = run_threads(_rank_main, world, inputs, log, timeout=60.0)
    outputs = [r[0] for r in results]
    cut = torch.arange(numel).tensor_split(world)  # the book's chunks: the first longer
    chunks = [(int(c[0]), int(c[-1]) + 1) for c in cut]
    starts = {lo: c for c, (lo, hi) in enumerate(chunks)}
    sends = {r: log.sends(src=r) for r in range(world)}  # data messages, in posting order
    per_phase = world - 1
    for r in range(world):
        if len(sends[r]) != 2 * per_phase:
            raise RuntimeError(
                f"record_ring: rank {r} sent {len(sends[r])} chunk messages, expected "
                f"{2 * per_phase} (one per step of each phase)"
            )
    state = [[v.clone() for v in row] for row in chunk_grid(chunks, inputs)]
    steps = []
    for k in range(2 * per_phase):
        phase = REDUCE_SCATTER if k < per_phase else ALL_GATHER
        before = [[v.clone() for v in row] for row in state]
        moves = []
        for src in range(world):
            m = sends[src][k]
            chunk = starts[m.offset]
            dst = m.dst
            moves.append(Move(src, dst, chunk, m.payload))
            if phase == ALL_GATHER:
                state[dst][chunk] = m.payload.clone()  # the chunk is copied as is
            else:
                # The receiver added the incoming partial sum to its own piece and forwards
                # the result at its next send: read that, rather than redo the addition.
                nxt = sends[dst][k + 1]
                if starts[nxt.offset] != chunk:
                    raise RuntimeError(
                        f"record_ring: rank {dst} received chunk {chunk} at step {k} but then "
                        f"sent chunk {starts[nxt.offset]} — expected the ring to forward the "
                        "partial sum it just made (is the book's ring broken?)"
                    )
                state[dst][chunk] = nxt.payload.clone()
        steps.append(Step(phase, k % per_phase, moves, before, [list(row) for row in state]))
    run = RingRun(
        world=world,
        numel=numel,
        chunks=chunks,
        inputs=inputs,
        steps=steps,
        outputs=outputs,
        reference=[r[1] for r in results],
        data_bytes_sent=[log.bytes_sent(r, watched=True) for r in range(world)],
        counted_bytes_sent=[r[2] for r in results],
        events=rec.events,
    )
    replayed = [torch.cat(row) for row in state]
    if not all(torch.equal(a, b) for a, b in zip(replayed, outputs)):
        raise RuntimeError("record_ring: the replayed steps do not end at the ring's result")
    return run


def _use_color(choice: str) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _unicode_ok() -> bool:
    enc = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    return enc in ("utf8", "utf_8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="minidp demo ring",
        description="Ring all-reduce step by step on real ranks, checked against torch.",
    )
    parser.add_argument("--world-size", type=int, default=4, help="number of ranks (default 4)")
    parser.add_argument("--numel", type=int, default=8, help="elements per tensor (default 8)")
    parser.add_argument(
        "--step",
        action="store_true",
        help="wait for Enter between steps (on a terminal each step redraws the screen)",
    )
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--trace", metavar="FILE", help="also save a Chrome trace JSON here")
    args = parser.parse_args(argv)
    if args.world_size < 2:
        parser.error("--world-size must be at least 2 (a ring needs two ranks)")
    if args.numel < args.world_size:
        parser.error("--numel must be at least --world-size (one chunk per rank)")
    if args.numel > 64:
        parser.error("--numel above 64 does not fit on a screen; try 8")

    style = Style(_use_color(args.color), _unicode_ok())
    run = record_ring(args.world_size, args.numel)
    out = print
    for line in render_intro(run, style):
        out(line)
    # On a terminal, --step redraws each step in place; piped output just scrolls.
    redraw = args.step and sys.stdout.isatty()
    for step in run.steps:
        if args.step:
            try:
                input(style.dim("  (Enter: next step) "))
            except EOFError:
                pass
        if redraw:
            out(CLEAR_SCREEN + render_intro(run, style)[0])
        out("")
        for line in render_step(run, step, style):
            out(line)
    out("")
    for line in render_summary(run, style):
        out(line)
    if args.trace:
        path = trace.save(args.trace, run.events)
        out(f"\nChrome trace: {path} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0 if run.equal else 1


if __name__ == "__main__":
    sys.exit(main())
