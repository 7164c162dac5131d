"""Terminal drawing of a recorded ring all-reduce: the rank x chunk grid, step by step.

Pure text from a ``RingRun`` (``ring_run.py``; recorded by ``ring.record_ring``): nothing
here runs a rank.
Colour through ANSI codes when asked, else ``*``/``=`` markers; ASCII arrows when stdout
cannot print Unicode.

    python -m minidp demo ring --world-size 4 --numel 8

Test: ``pytest tests/test_demo_ring.py``
"""

from __future__ import annotations

import torch

from minidp.comm.agree import HEADER_BYTES
from minidp.tools.demo.ring_run import REDUCE_SCATTER, RingRun, Step, digits_per_rank


class Style:
    """ANSI styles, or nothing when colour is off; ASCII glyphs when stdout is not UTF-8."""

    def __init__(self, color: bool, unicode: bool) -> None:
        self.color = color
        self.arrow = "→" if unicode else "->"
        self.to_left = "◀──" if unicode else "<--"
        self.to_right = "──▶" if unicode else "-->"
        self.rule = "─" if unicode else "-"
        self.dot = "·" if unicode else "."
        self.dash = "—" if unicode else "-"

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
