"""Command-line values every benchmark checks the same way: a bad one is a usage error.

``--worlds 0``, ``--caps abc``, ``--devices 0``: argparse prints one line naming the option,
what it expected and what it got, and exits 2 — never a traceback from deep inside a run.
The ``type=`` functions below do the checking; :func:`sharded_cli` is the command line
``bench zero`` and ``bench fsdp`` share.

Test: ``pytest tests/test_bench_args.py``
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from minidp.launch import ProcessWorld
from minidp.tools.bench import abba


def _number(text: str, kind: type, low: float, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _number(text, int, 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    return _number(text, int, 0, "an integer >= 0")


def positive_float(text: str) -> float:
    return _number(text, float, 1e-300, "a positive number")


def world_size(text: str) -> int:
    """A world of ranks to measure: at least 2 (one rank has nobody to talk to)."""
    return _number(text, int, 2, "a world size of at least 2 ranks")


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
    abba.add_arguments(parser, budget=90.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.width, args.warmup, args.min_blocks, args.max_blocks = 64, 1, 2, 2
        args.breakdown_steps = 2
    args.abba = abba.options(args, parser)
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
