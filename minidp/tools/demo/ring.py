"""Classroom demo: ring all-reduce, step by step, on real ranks.

    python -m minidp demo ring --world-size 4 --numel 8
    python -m minidp demo ring --step            # wait for Enter between steps
    python -m minidp demo ring --trace ring.json # also save the Chrome trace (Perfetto, or
                                                 # python -m minidp classroom --trace ring.json)

``world-size`` thread-ranks, each with a real gloo group, run the book's
``ring_all_reduce`` (what lesson 8 prints) through a tapped group: the recorder
(``minidp.tools.recorder.ring``), which the classroom and ``ring_steps.png`` show too. The
demo computes nothing itself: it reads the recorded steps back and draws a rank x chunk
grid per step (``ring_view.py``). Rank ``r`` holds multiples of ``10**r``, so the digit at
position ``r`` of any partial sum says whether rank ``r``'s piece is in it (1011 = ranks
0, 1 and 3); it ends with ``torch.equal`` against ``torch.distributed.all_reduce`` (gloo)
on every rank. Colour: on a terminal unless NO_COLOR is set (``--color always|never``).

Test: ``pytest tests/test_demo_ring.py``
"""

from __future__ import annotations

import argparse
import sys

from minidp import trace
from minidp.tools.demo.ring_view import (
    RingRun,
    Style,
    render_intro,
    render_step,
    render_summary,
    ring_run,
)
from minidp.tools.recorder import Threads
from minidp.tools.recorder.ring import ring_events

CLEAR_SCREEN = "\033[2J\033[H"  # ANSI: clear, cursor home


def record_ring(world: int, numel: int) -> RingRun:
    """Run the book's ring on ``world`` thread-ranks (the recorder) and read its steps back."""
    return ring_run(ring_events(Threads(world), numel))


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

    style = Style.for_stdout(args.color)
    run = record_ring(args.world_size, args.numel)
    print("\n".join(render_intro(run, style)))
    # On a terminal, --step redraws each step in place; piped output just scrolls.
    redraw = args.step and sys.stdout.isatty()
    for step in run.steps:
        if args.step:
            try:
                input(style.dim("  (Enter: next step) "))
            except EOFError:
                pass
        if redraw:
            print(CLEAR_SCREEN + render_intro(run, style)[0])
        print("\n" + "\n".join(render_step(run, step, style)))
    print("\n" + "\n".join(render_summary(run, style)))
    if args.trace:
        path = trace.save(args.trace, run.events)
        print(f"\nChrome trace: {path} (open in https://ui.perfetto.dev or chrome://tracing)")
    return 0 if run.equal else 1


if __name__ == "__main__":
    sys.exit(main())
