"""Classroom demo: ring all-reduce, step by step, on real ranks.

    python -m minidp demo ring --world-size 4 --numel 12
    python -m minidp demo ring --step            # wait for Enter between steps
    python -m minidp demo ring --trace ring.json # also save a Chrome trace (Perfetto)

What happens: ``world-size`` ranks start as threads of this process, each with its own
real gloo process group. Each rank runs minidp's ``ring_all_reduce`` (textbook layout:
one chunk per rank, one message per chunk) through a *tapped* group that logs every
message with a copy of its payload (``minidp.trace.tap``). The demo does not compute the
ring itself: it replays the log — who sent which chunk to whom at each step, and what
each rank then held — and draws a grid per step (rank x chunk).

Inputs are integers chosen so that sums stay readable: with up to 6 ranks, rank ``r``
holds multiples of ``10**r``, so in any partial sum the digit at position ``r`` (from the
right) says whether rank ``r``'s piece is in it: 1011 = ranks 0, 1 and 3.

It ends by running ``torch.distributed.all_reduce`` (gloo) on the same inputs and
checking ``torch.equal`` on every rank.

Colour: on when stdout is a terminal and NO_COLOR is unset (``--color always|never``).

Test: ``pytest tests/test_demo_ring.py``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import torch
import torch.distributed as dist

from minidp import trace
from minidp.comm import count_traffic, ring_all_reduce
from minidp.comm import group as groups
from minidp.comm.ring import textbook_layout
from minidp.launch import run_threads

REDUCE_SCATTER, ALL_GATHER = "reduce-scatter", "all-gather"


@dataclasses.dataclass
class Move:
    """One message of one step: ``src`` sent chunk ``chunk`` (values ``payload``) to ``dst``."""

    src: int
    dst: int
    chunk: int
    payload: torch.Tensor


@dataclasses.dataclass
class Step:
    """One step of the ring: the messages, then what every rank holds afterwards."""

    phase: str  # REDUCE_SCATTER or ALL_GATHER
    index: int  # 0-based within the phase
    moves: list[Move]
    before: list[list[torch.Tensor]]  # [rank][chunk] values before the step
    after: list[list[torch.Tensor]]  # [rank][chunk] values after the step


@dataclasses.dataclass
class RingRun:
    """A recorded ring all-reduce: inputs, every step, results and the torch check."""

    world: int
    numel: int
    chunks: list[tuple[int, int]]
    inputs: list[torch.Tensor]
    steps: list[Step]
    outputs: list[torch.Tensor]  # minidp ring_all_reduce result, per rank
    reference: list[torch.Tensor]  # torch.distributed.all_reduce result, per rank
    data_bytes_sent: list[int]  # per rank: the chunks (what the algorithm moves)
    header_bytes_sent: list[int]  # per rank: minidp's cross-rank call check
    counted_bytes_sent: list[int]  # per rank: count_traffic's total (data + header)
    events: list[dict]  # trace events (sends/receives), for a Chrome trace

    @property
    def direction(self) -> int:
        """+1 if rank r sends to rank r+1, -1 if to rank r-1 (read from the messages)."""
        m = self.steps[0].moves[0]
        return 1 if (m.dst - m.src) % self.world == 1 else -1

    @property
    def equal(self) -> bool:
        return all(torch.equal(a, b) for a, b in zip(self.outputs, self.reference))

    def grid(self, values: list[torch.Tensor]) -> list[list[torch.Tensor]]:
        """``values`` (one tensor per rank) cut into this run's chunks: ``[rank][chunk]``."""
        return chunk_grid(self.chunks, values)


def chunk_grid(chunks: list[tuple[int, int]], values: list[torch.Tensor]):
    """Cut each rank's tensor into ``chunks``: ``[rank][chunk]`` views."""
    return [[v[lo:hi] for lo, hi in chunks] for v in values]


def readable_inputs(world: int, numel: int) -> list[torch.Tensor]:
    """Integer inputs whose sums show who contributed (see the module docstring)."""
    i = torch.arange(numel, dtype=torch.int64)
    if world <= 6:
        return [(i % 9 + 1) * 10**r for r in range(world)]
    return [r * 100 + i + 1 for r in range(world)]  # too many ranks for digits: just distinct


def _rank_main(rank: int, world: int, inputs: list[torch.Tensor], log: trace.MessageLog):
    x = inputs[rank].clone()
    g = trace.tap(groups.resolve(), log, watch=x)
    with count_traffic() as counted:
        ring_all_reduce(x, "sum", group=g, layout="textbook")
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
    chunks, _ = textbook_layout(numel, world)
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
                        "partial sum it just made (is minidp.comm.ring's schedule broken?)"
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
        header_bytes_sent=[log.bytes_sent(r, watched=False) for r in range(world)],
        counted_bytes_sent=[r[2] for r in results],
        events=rec.events,
    )
    replayed = [torch.cat(row) for row in state]
    if not all(torch.equal(a, b) for a, b in zip(replayed, outputs)):
        raise RuntimeError("record_ring: the replayed steps do not end at the ring's result")
    return run


# ----------------------------------------------------------------------------- drawing


class Style:
    """ANSI styles, or nothing when colour is off; ASCII glyphs when stdout is not UTF-8."""

    def __init__(self, color: bool, unicode: bool) -> None:
        self.color = color
        self.arrow = "→" if unicode else "->"
        self.to_left = "◀──" if unicode else "<--"
        self.to_right = "──▶" if unicode else "-->"
        self.rule = "─" if unicode else "-"
        self.dot = "·" if unicode else "."

    def _sgr(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def bold(self, t: str) -> str:
        return self._sgr("1", t)

    def dim(self, t: str) -> str:
        return self._sgr("2", t)

    def moved(self, t: str) -> str:  # arrived this step, still a partial sum
        return self._sgr("1;30;43", t)

    def moved_done(self, t: str) -> str:  # arrived this step and is the final sum
        return self._sgr("1;30;42", t)

    def done(self, t: str) -> str:  # holds the final sum
        return self._sgr("1;32", t)

    def rank(self, r: int, t: str) -> str:
        return self._sgr(("36", "35", "34", "33", "31", "32")[r % 6], t)


def _fmt(values: torch.Tensor, width: int, cells: int = 0) -> str:
    """``[  1   2   3]`` with ``width`` digits per value, padded to ``cells`` values."""
    text = "[" + " ".join(f"{int(v):>{width}d}" for v in values) + "]"
    return text.ljust(2 + cells * (width + 1) - 1)


def _widths(run: RingRun) -> tuple[int, int]:
    """Digits per value and values per (widest) chunk, for aligned columns."""
    digits = max(len(str(int(v))) for t in run.outputs + run.inputs for v in t)
    return digits, max(hi - lo for lo, hi in run.chunks)


def render_grid(run: RingRun, grid, highlight: set[tuple[int, int]], style: Style) -> list[str]:
    """Lines of a rank x chunk table; cells in ``highlight`` marked as just arrived."""
    width, cells = _widths(run)
    final = run.grid(run.outputs)
    cell_w = len(_fmt(run.outputs[0][:0], width, cells))
    head = " " * 9 + " ".join(f"chunk {c}".center(cell_w) + "  " for c in range(run.world))
    lines = [style.dim(head)]
    for r, row in enumerate(grid):
        shown = []
        for c, v in enumerate(row):
            text = _fmt(v, width)
            pad = " " * (cell_w - len(text))
            arrived, final_ = (r, c) in highlight, torch.equal(v, final[r][c])
            if style.color:
                paint = {(True, True): style.moved_done, (True, False): style.moved}
                paint[(False, True)] = style.done
                text = paint.get((arrived, final_), str)(text) + "  " + pad
            else:  # markers instead of colours: * arrived this step, = final sum
                text += ("*" if arrived else " ") + ("=" if final_ else " ") + pad
            shown.append(text)
        lines.append(f"  {style.rank(r, f'rank {r}')} " + " ".join(shown))
    return lines


def render_step(run: RingRun, step: Step, style: Style) -> list[str]:
    total = run.world - 1
    title = f"{step.phase}, step {step.index + 1} of {total}"
    if step.phase == REDUCE_SCATTER:
        what = "each rank sends one partial sum to its neighbour, which adds its own piece to it"
    else:
        what = "each rank passes one finished chunk on to its neighbour, which keeps a copy"
    width, cells = _widths(run)
    lines = [style.bold(f"{title}: ") + what]
    for m in sorted(step.moves, key=lambda m: m.dst):
        src, dst = style.rank(m.src, f"rank {m.src}"), style.rank(m.dst, f"rank {m.dst}")
        line = f"    {src} {style.arrow} {dst}  chunk {m.chunk}  {_fmt(m.payload, width, cells)}"
        if step.phase == REDUCE_SCATTER:
            had = _fmt(step.before[m.dst][m.chunk], width)
            now = _fmt(step.after[m.dst][m.chunk], width)
            line += f"   had {had} + received = {now}"
        lines.append(line)
    lines.append("")
    highlight = {(m.dst, m.chunk) for m in step.moves}
    lines += render_grid(run, step.after, highlight, style)
    return lines


def render_intro(run: RingRun, style: Style) -> list[str]:
    link = style.to_right if run.direction == 1 else style.to_left
    ring = f" {link} ".join(style.rank(r, f"rank {r}") for r in range(run.world))
    ring += f" {link} {style.rank(0, 'rank 0')}"
    neighbour = "next rank (r+1)" if run.direction == 1 else "previous rank (r-1)"
    nbytes = run.numel * run.inputs[0].element_size()
    lines = [
        style.bold(
            f"Ring all-reduce (sum) of {run.numel} integers on {run.world} ranks "
            f"(threads with real gloo groups)"
        ),
        f"  every rank sends only to the {neighbour}: {ring}",
        f"  the tensor is cut into {run.world} chunks (one per rank); "
        f"{run.world - 1} reduce-scatter steps, then {run.world - 1} all-gather steps",
    ]
    if run.world <= 6:
        lines.append(
            f"  rank r holds multiples of 10^r: in every sum, digit r (from the right) "
            f"shows whether rank r's piece is in it  (S = {nbytes} bytes per rank)"
        )
    legend = (
        f"{style.moved('[..]')} arrived this step   {style.done('[..]')} holds the final sum   "
        f"{style.moved_done('[..]')} both"
        if style.color
        else "[..]*  arrived this step   [..] =  holds the final sum"
    )
    lines += ["  " + legend, "", style.bold("start: each rank's own tensor")]
    lines += render_grid(run, run.grid(run.inputs), set(), style)
    return lines


def render_summary(run: RingRun, style: Style) -> list[str]:
    n, s = run.world, run.numel * run.inputs[0].element_size()
    expect = 2 * (n - 1) * s / n
    lines = [style.bold("traffic (measured through the tapped group)")]
    for r in range(n):
        lines.append(
            f"  {style.rank(r, f'rank {r}')} sent {run.data_bytes_sent[r]:>6d} bytes of chunks "
            f"+ {run.header_bytes_sent[r]:>4d} bytes of header check "
            f"(count_traffic: {run.counted_bytes_sent[r]} bytes)"
        )
    lines.append(
        f"  chunks per rank = 2(n-1)/n {style.dot} S = 2*{n - 1}/{n} * {s} = {expect:g} bytes, "
        "nearly flat in n: the ring's point"
    )
    lines.append(
        "  (header check: before any collective, minidp checks that every rank called the same"
        " one — a few bytes via rank 0)"
    )
    ok = run.equal
    verdict = style.done("torch.equal: True on every rank") if ok else "torch.equal: FALSE"
    lines += [
        "",
        style.bold("check against torch.distributed.all_reduce (gloo), same inputs"),
        f"  minidp ring : {run.outputs[0].tolist()}",
        f"  torch       : {run.reference[0].tolist()}",
        f"  {verdict}",
    ]
    return lines


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
    parser.add_argument("--numel", type=int, default=12, help="elements per tensor (default 12)")
    parser.add_argument("--step", action="store_true", help="wait for Enter between steps")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    parser.add_argument("--trace", metavar="FILE", help="also save a Chrome trace JSON here")
    args = parser.parse_args(argv)
    if args.world_size < 2:
        parser.error("--world-size must be at least 2 (a ring needs two ranks)")
    if args.numel < args.world_size:
        parser.error("--numel must be at least --world-size (one chunk per rank)")
    if args.numel > 64:
        parser.error("--numel above 64 does not fit on a screen; try 12")

    style = Style(_use_color(args.color), _unicode_ok())
    run = record_ring(args.world_size, args.numel)
    out = print
    for line in render_intro(run, style):
        out(line)
    for step in run.steps:
        if args.step:
            try:
                input(style.dim("  (Enter: next step) "))
            except EOFError:
                pass
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
