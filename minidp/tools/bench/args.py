"""Command-line values every benchmark checks the same way: a bad one is a usage error.

``--worlds 0``, ``--caps abc``, ``--devices 0``: argparse prints one line naming the option,
what it expected and what it got, and exits 2 — never a traceback from deep inside a run.
The ``type=`` functions below do the checking; :func:`sharded_cli` is the command line
``bench zero`` and ``bench fsdp`` share, with the ABBA stop rule's options.

Test: ``pytest tests/test_bench_args.py``
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

from minidp.launch import ProcessWorld


def number(what: str, kind: type = int, low: float = 1, high: float = math.inf, hint: str = ""):
    """An argparse ``type``: ``kind(text)``, finite and in ``[low, high]``, else "expected
    ``what``, got ``text``" (and the hint). ``float()`` happily reads "inf", "nan" and
    "1e999": those are refused too."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = math.nan  # refused below, with the same message
        if not (math.isfinite(value) and low <= value <= high):
            hint_ = f". Hint: {hint}" if hint else ""
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}{hint_}")
        return value

    return parse


POSITIVE = math.ulp(0.0)  # the smallest float above 0: ``low=POSITIVE`` means "> 0"
positive_int = number("a positive integer")
nonnegative_int = number("an integer >= 0", low=0)
positive_float = number("a positive number", float, POSITIVE)
nonnegative_float = number("a number >= 0", float, 0)
world_size = number("a world size of at least 2 ranks", low=2)  # one rank has nobody to talk to


def int_list(text: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``: positive integers, comma-separated."""
    return [positive_int(part.strip()) for part in text.split(",")]


def float_list(text: str) -> list[float]:
    """``"0.5,25"`` -> ``[0.5, 25.0]``: positive numbers, comma-separated."""
    return [positive_float(part.strip()) for part in text.split(",")]


def sharded_cli(prog: str, description: str, width: int, argv) -> argparse.Namespace:
    """The command line of the sharded benches (``bench zero``, ``bench fsdp``), checked."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--world-size", type=world_size, default=2)
    parser.add_argument("--width", type=positive_int, default=width, help=f"MLP width ({width})")
    parser.add_argument("--batch", type=positive_int, default=64, help="samples per rank/step")
    parser.add_argument("--warmup", type=nonnegative_int, default=2, help="untimed steps, first")
    parser.add_argument("--threads", type=positive_int, default=1, help="intra-op threads/rank")
    parser.add_argument("--breakdown", action="store_true", help="time forward/backward/step apart")
    parser.add_argument("--breakdown-steps", type=positive_int, default=10, help="steps per side")
    parser.add_argument("--quick", action="store_true", help="tiny model, 2 blocks: smoke run")
    add_abba_arguments(parser, budget=90.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.warmup, args.min_blocks, args.max_blocks = 64, 1, 2, 2
        args.breakdown_steps = 2
    args.abba = abba_options(args, parser)
    return args


def run_ranks(args, rank_main: Callable, report: Callable, numel: int) -> int:
    """Run ``rank_main(rank, world, args)`` on a fresh world of ``args.world_size`` processes,
    then ``report(results, world, numel, args.fsdp2)``; time it all. Returns 0 (exit code)."""
    t0 = time.perf_counter()
    with ProcessWorld(args.world_size, timeout=300) as ranks:
        results = ranks.run(rank_main, args)
    report(results, args.world_size, numel, args.fsdp2)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    return 0


def add_abba_arguments(parser: argparse.ArgumentParser, budget: float) -> None:
    """The stop rule's options, shared by the benches that use :func:`run_pair`."""
    parser.add_argument(
        "--halfwidth", type=float, default=0.03, help="stop when the 95%% interval is ±this"
    )
    parser.add_argument("--min-blocks", type=int, default=5, help="ABBA blocks at least")
    parser.add_argument("--max-blocks", type=int, default=30, help="ABBA blocks at most")
    parser.add_argument(
        "--budget", type=float, default=budget, help="step seconds per pair at most"
    )


def abba_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """The stop rule's keyword arguments from ``args``; a bad value is a usage error."""
    if not (0 < args.halfwidth < 1):
        parser.error(
            f"--halfwidth: expected a fraction in (0, 1) such as 0.03, got {args.halfwidth}"
        )
    if not (1 <= args.min_blocks <= args.max_blocks):
        parser.error(
            f"--min-blocks/--max-blocks: expected 1 <= min <= max, got {args.min_blocks} "
            f"and {args.max_blocks}"
        )
    if args.budget <= 0:
        parser.error(f"--budget: expected positive seconds, got {args.budget}")
    return {
        "halfwidth": args.halfwidth,
        "min_blocks": args.min_blocks,
        "max_blocks": args.max_blocks,
        "budget_s": args.budget,
    }
