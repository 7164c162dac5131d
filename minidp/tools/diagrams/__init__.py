"""Regenerate the pictures in ``diagrams/`` from real, traced runs.

    python -m minidp diagrams                    # all pictures into diagrams/
    python -m minidp diagrams --out /tmp/pics    # somewhere else
    python -m minidp diagrams --only ring traffic

Every picture is drawn from something that actually ran on this machine — nothing is
typed in by hand. One file per picture, each with ``draw(out, quick) -> path``:

* ``ring_steps.py`` → ``ring_steps.png``: minidp's ring all-reduce on 4 thread-ranks,
  replayed from the messages a tapped group logged (the same run as
  ``python -m minidp demo ring``);
* ``traffic.py`` → ``traffic.png``: bytes per rank, parameter server vs ring, as the world
  grows (``minidp.comm.count_traffic``, minus the header check measured on its own);
* ``dp_pipeline.py`` → ``dp_pipeline.png``: one ``minidp.DataParallel`` step, stage by
  stage, per simulated device (trace spans and the DP memory report);
* ``ddp_timeline.py`` → ``ddp_timeline.png``: one ``minidp.DistributedDataParallel`` step
  on 2 rank processes: backward, gradient-ready hooks, bucket all-reduces overlapping the
  backward;
* ``bucket_sweep.py`` → ``bucket_sweep.png``: DDP step time against ``bucket_cap_mb``;
* ``fsdp_timeline.py`` → ``fsdp_timeline.png``: one ``minidp.fully_shard`` step on 2 rank
  processes: each unit's all-gather prefetched while the previous unit computes.
* ``memory_stages.py`` → ``memory_stages.png``: bytes of weights, gradients and optimizer
  state per rank after one AdamW step of DDP, ZeRO-1, ZeRO-2 and FSDP (2 and 4 ranks).

Shared: ``common.py`` (colours, pyplot, saving), ``workloads.py`` (models, training loop).

Needs matplotlib (``pip install matplotlib``); drawn with the Agg backend, no display.
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

DIAGRAMS: dict[str, tuple[Callable[[Path, bool], Path], str | None, str]] = {
    # name: (function, package it needs or None, what it shows)
    "ring": (ring_steps.draw, None, "ring all-reduce step grid (4 ranks)"),
    "traffic": (traffic.draw, None, "parameter server vs ring bytes per rank, n = 2..16"),
    "dp": (dp_pipeline.draw, "minidp.dp", "one traced DataParallel step, bytes per device"),
    "ddp": (ddp_timeline.draw, "minidp.ddp", "one traced DDP step on 2 ranks, overlap on/off"),
    "sweep": (bucket_sweep.draw, "minidp.ddp", "DDP step time vs bucket_cap_mb (2 ranks)"),
    "fsdp": (fsdp_timeline.draw, "minidp.fsdp", "one traced FSDP step on 2 ranks, prefetch"),
    "memory": (memory_stages.draw, "minidp.zero", "per-rank bytes by stage (DDP, ZeRO, FSDP)"),
}


def _available(package: str | None) -> bool:
    return package is None or importlib.util.find_spec(package) is not None


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
    failed = 0
    for i, name in enumerate(names, 1):
        fn, package, what = DIAGRAMS[name]
        prefix = f"[{i}/{len(names)}] {name:<9}"
        if not _available(package):
            print(f"{prefix} skipped: needs {package}", flush=True)
            continue
        print(f"{prefix} {what} ...", end=" ", flush=True)
        t0 = time.perf_counter()
        # --quick: fewer steps and settings (tests); the committed pictures use full runs
        path = fn(out, args.quick)
        print(f"{path} ({time.perf_counter() - t0:.1f}s)", flush=True)
    return 1 if failed else 0
