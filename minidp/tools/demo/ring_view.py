"""A recorded ring all-reduce, read back from the recorder's events and drawn as text.

    python -m minidp demo ring --world-size 4 --numel 8

:func:`ring_run` reads ``minidp.tools.recorder.ring``'s events back, nothing recomputed,
into a :class:`RingRun` — every step's messages and what every rank held before and after
it — which the ``render_*`` functions print as a rank x chunk grid (``ring_steps.png``
draws it). Colour through ANSI codes when asked, else ``*``/``=`` markers (``style.py``).

Test: ``pytest tests/test_demo_ring.py``
"""

from __future__ import annotations

import dataclasses

import torch

from minidp.comm.agree import HEADER_BYTES
from minidp.tools.demo.style import Style
from minidp.tools.recorder.ring import digits_per_rank

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
    outputs: list[torch.Tensor]  # the book's ring_all_reduce result, per rank
    reference: list[torch.Tensor]  # torch.distributed.all_reduce result, per rank
    data_bytes_sent: list[int]  # per rank: the chunks, as the tapped group saw them
    counted_bytes_sent: list[int]  # per rank: count_traffic's total
    events: list[dict]  # the recorder's trace events, for a Chrome trace

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
        return [[v[lo:hi] for lo, hi in self.chunks] for v in values]


def ring_run(events: list[dict]) -> RingRun:
    """The steps of the ring recorded in ``events`` (``minidp.tools.recorder.ring``)."""

    def by_rank(name: str) -> list[dict]:
        return [e["args"] for e in sorted(events, key=lambda e: e["pid"]) if e["name"] == name]

    def grid(holds: list[list]) -> list[torch.Tensor]:
        return [torch.tensor(v, dtype=torch.int64) for v in holds]

    inputs, results = by_rank("ring inputs"), by_rank("ring result")
    world, chunks = inputs[0]["world"], [tuple(c) for c in inputs[0]["chunks"]]
    before = [grid(a["holds"]) for a in inputs]
    steps, sent = [], [0] * world
    for k in range(2 * (world - 1)):
        now = sorted((e for e in events if e["name"] == "ring step" and e["args"]["step"] == k + 1),
                     key=lambda e: e["pid"])  # fmt: skip
        moves = [Move(e["pid"], e["args"]["to"], e["args"]["chunk"],
                      torch.tensor(e["args"]["values"], dtype=torch.int64))
                 for e in now]  # fmt: skip
        for e in now:
            sent[e["pid"]] += e["args"]["bytes"]
        after = [grid(e["args"]["holds"]) for e in now]
        phase = REDUCE_SCATTER if k < world - 1 else ALL_GATHER
        steps.append(Step(phase, k % (world - 1), moves, before, after))
        before = after
    ints = [torch.tensor(r["result"], dtype=torch.int64) for r in results]
    return RingRun(world=world, numel=chunks[-1][1], chunks=chunks,
                   inputs=[torch.cat(row) for row in steps[0].before], steps=steps, outputs=ints,
                   reference=[torch.tensor(r["torch"], dtype=torch.int64) for r in results],
                   data_bytes_sent=sent, counted_bytes_sent=[r["sent_bytes"] for r in results],
                   events=events)  # fmt: skip


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
    """Lines for one step: every message sent, then the rank x chunk table after it."""

    total = run.world - 1
    to = "r+1" if run.direction == 1 else "r-1"
    title = f"{step.phase}, step {step.index + 1} of {total} (every rank r sends to rank {to})"
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
    """Lines before the first step: the ring's direction, the chunks, the legend, the inputs."""
    link = style.to_right if run.direction == 1 else style.to_left
    ring = f" {link} ".join(style.rank(r, f"rank {r}") for r in range(run.world))
    ring += f" {link} {style.rank(0, 'rank 0')}"
    neighbour = "next rank (r+1)" if run.direction == 1 else "previous rank (r-1)"
    nbytes = run.numel * run.inputs[0].element_size()
    lines = [
        style.bold(
            f"Ring all-reduce (sum) of {run.numel} integers on {run.world} ranks "
            f"(the book's ring, lesson 8; threads with real gloo groups)"
        ),
        f"  every rank sends only to the {neighbour}: {ring}",
        f"  the tensor is cut into {run.world} chunks (one per rank); "
        f"{run.world - 1} reduce-scatter steps, then {run.world - 1} all-gather steps",
    ]
    d = digits_per_rank(run.world, run.numel)
    if d == 1:
        lines.append(
            f"  rank r holds multiples of 10^r: in every sum, digit r (from the right) "
            f"shows whether rank r's piece is in it  (S = {nbytes} bytes per rank)"
        )
    elif d:
        lines.append(
            f"  rank r holds multiples of 10^({d}r): in every sum, the {d}-digit group r (from "
            f"the right) is the element's number if rank r's piece is in it, else 0s  "
            f"(S = {nbytes} bytes per rank)"
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
    """Lines after the last step: bytes each rank sent, and the check against torch."""
    n, s = run.world, run.numel * run.inputs[0].element_size()
    expect = 2 * (n - 1) * s / n
    lines = [style.bold("traffic (measured through the tapped group)")]
    for r in range(n):
        lines.append(
            f"  {style.rank(r, f'rank {r}')} sent {run.data_bytes_sent[r]:>6d} bytes of chunks "
            f"(count_traffic: {run.counted_bytes_sent[r]} bytes)"
        )
    lines.append(
        f"  chunks per rank = 2(n-1)/n {style.dot} S = 2*{n - 1}/{n} * {s} = {expect:g} bytes, "
        "nearly flat in n: the ring's point"
    )
    # What the engine's ring adds on the wire, sized from agree.py
    lines += [
        f"  (minidp.comm's ring adds one thing on the wire: a {HEADER_BYTES}-byte header in its "
        f"first message to every other rank {style.dash}",
        "   so that ranks calling different collectives raise the same error instead of hanging)",
    ]
    ok = run.equal
    verdict = style.done("torch.equal: True on every rank") if ok else "torch.equal: FALSE"
    lines += [
        "",
        style.bold("check against torch.distributed.all_reduce (gloo), same inputs"),
        f"  book's ring : {run.outputs[0].tolist()}",
        f"  torch       : {run.reference[0].tolist()}",
        f"  {verdict}",
    ]
    return lines
