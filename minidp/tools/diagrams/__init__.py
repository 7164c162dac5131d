"""Regenerate the pictures in ``diagrams/`` from real, traced runs.

    python -m minidp diagrams                    # all pictures into diagrams/
    python -m minidp diagrams --out /tmp/pics    # somewhere else
    python -m minidp diagrams --only ring traffic

Every picture is drawn from something that actually ran on this machine — nothing is
typed in by hand — and all but the bucket sweep from the recorder's events
(``minidp.tools.recorder``: the runs the demos print and the classroom steps through). One
file per picture (:data:`DIAGRAMS` says what each shows), each with ``draw(out, quick) ->
path``; ``common.py`` holds their colours, pyplot and saving. Needs matplotlib (``pip
install matplotlib``); drawn with the Agg backend, no display.

Test: ``pytest tests/test_diagrams.py``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from minidp.tools.diagrams import (
    bucket_sweep,
    ddp_timeline,
    dp_pipeline,
    fsdp_timeline,
    memory_stages,
    ring_steps,
    traffic,
)

DIAGRAMS: dict[str, tuple[Callable[[Path, bool], Path], str]] = {
    # name: (function, what it shows)
    "ring": (ring_steps.draw, "ring all-reduce step grid (4 ranks)"),
    "traffic": (traffic.draw, "parameter server vs ring bytes per rank, n = 2..16"),
    "dp": (dp_pipeline.draw, "one traced DataParallel step, bytes per device"),
    "ddp": (ddp_timeline.draw, "one traced DDP step on 2 ranks, overlap on/off"),
    "sweep": (bucket_sweep.draw, "DDP step time vs bucket_cap_mb (2 ranks)"),
    "fsdp": (fsdp_timeline.draw, "one traced FSDP step on 2 ranks, prefetch"),
    "memory": (memory_stages.draw, "per-rank bytes by stage (DDP, ZeRO, FSDP)"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="minidp diagrams", description="Regenerate the pictures from real traced runs."
    )
    parser.add_argument("--out", default="diagrams", help="output folder (default diagrams/)")
    parser.add_argument(
        "--only", nargs="+", choices=sorted(DIAGRAMS), help="draw only these pictures"
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer steps and settings (for tests; noisier)"
    )
    args = parser.parse_args(argv)
    if importlib.util.find_spec("matplotlib") is None:
        print("minidp diagrams: needs matplotlib — pip install matplotlib", file=sys.stderr)
        return 2
    torch.set_num_threads(1)  # ranks and devices share 2 cores here; keep timings honest
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(DIAGRAMS)
    for i, name in enumerate(names, 1):
        fn, what = DIAGRAMS[name]
        print(f"[{i}/{len(names)}] {name:<9} {what} ...", end=" ", flush=True)
        t0 = time.perf_counter()
        # --quick: fewer steps and settings (tests); the committed pictures use full runs
        path = fn(out, args.quick)
        print(f"{path} ({time.perf_counter() - t0:.1f}s)", flush=True)
    return 0
