"""The ``minidp`` command: classroom demos, benchmarks and diagrams.

    python -m minidp --help
    python -m minidp demo --help                 # the demos and their options
    python -m minidp demo ring --world-size 4 --numel 8
    python -m minidp bench allreduce
    python -m minidp diagrams --out diagrams
    python -m minidp classroom --out classroom   # real runs, stepped through in a browser

Each ``demo X`` / ``bench X`` lives in ``minidp/tools/demo/X.py`` / ``minidp/tools/bench/X.py`` as a
``main(argv)`` function with its own ``--help``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# where each command lives (the library itself never imports these: tests/test_imports.py)
_PACKAGES = {
    "diagrams": "tools.diagrams",
    "exercise": "tools.exercise",
    "classroom": "tools.classroom",
}
DEMOS = {
    "ring": "ring all-reduce step by step: chunks moving and summing round the ring",
    "dp": "one DataParallel step: scatter, replicate, parallel_apply, gather, backward",
    "ddp": "one DistributedDataParallel step: hooks, buckets launching during backward",
}
BENCHES = {
    "allreduce": "minidp all_reduce (auto) vs ring vs naive vs gloo: time, algbw, busbw, ratio",
    "checked": "checked mode (MINIDP_DEBUG=DETAIL) vs plain: the cost per all-reduce",
    "dp": "minidp DataParallel vs torch.nn.DataParallel vs one device: step time, bytes",
    "ddp": "minidp DDP vs torch DDP (overlap, no overlap, naive) and a bucket-size sweep",
    "fsdp": "minidp fully_shard vs torch FSDP2: ABBA verdict vs 1.05x, gathers, bytes moved",
    "scaling": "step time and bytes per rank vs model size, minidp and torch: table + PNG",
    "zero": "minidp ZeRO-1/2, HSDP vs torch's: ABBA verdicts vs targets, bytes moved",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="minidp",
        description="Data parallelism from scratch, checked against PyTorch.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="demos:\n"
        + "".join(f"  demo {k:<10} {v}\n" for k, v in DEMOS.items())
        + "benchmarks:\n"
        + "".join(f"  bench {k:<9} {v}\n" for k, v in BENCHES.items())
        + "\n'minidp demo ring --help' shows a command's own options.",
    )
    sub = parser.add_subparsers(
        dest="command", metavar="{demo,bench,exercise,memory,diagrams,classroom}"
    )
    for name, table, text in (
        ("demo", DEMOS, "run a classroom demo"),
        ("bench", BENCHES, "run a benchmark"),
    ):
        # add_help=False: "minidp demo ring --help" must reach the demo's own parser
        p = sub.add_parser(name, help=text, description=text, add_help=False)
        p.add_argument(
            "which", choices=sorted(table), help=", ".join(f"{k}: {v}" for k, v in table.items())
        )
    # add_help=False: "minidp exercise check --help" must reach the exercise parser
    sub.add_parser("exercise", help="list and check exercises", add_help=False)
    # add_help=False: "minidp memory --help" must reach the planner's own parser
    sub.add_parser(
        "memory", help="plan: model-state bytes per GPU for DDP, ZeRO-1/2, FSDP", add_help=False
    )
    sub.add_parser(
        "diagrams",
        help="regenerate the pictures in diagrams/ from real traced runs",
        add_help=False,
    )
    # add_help=False: "minidp classroom --help" must reach the classroom's own parser
    sub.add_parser(
        "classroom",
        help="record real runs and write a page that steps through them in a browser",
        add_help=False,
    )
    if argv[:1] in (["demo"], ["bench"]) and (len(argv) == 1 or argv[1].startswith("-")):
        parser.print_help()  # "minidp demo --help": list the demos rather than fail
        if argv[0] == "demo":  # and each demo's own options: a class picks one at a glance
            for which in DEMOS:
                print(f"\n{'=' * 20} minidp demo {which} {'=' * 20}")
                try:
                    importlib.import_module(f"minidp.tools.demo.{which}").main(["--help"])
                except SystemExit:  # argparse's --help exits after printing
                    pass
        return 0
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command in ("diagrams", "exercise", "classroom"):
        module = importlib.import_module(f"minidp.{_PACKAGES[args.command]}")
    elif args.command == "memory":
        module = importlib.import_module("minidp.tools.planner.plan_cli")
    else:
        module = importlib.import_module(f"minidp.tools.{args.command}.{args.which}")
    return module.main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
