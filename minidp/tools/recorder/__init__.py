"""One recorder: real runs of minidp as ``minidp.trace`` events — which the demos print, the
diagrams draw and the classroom steps through.

    events = ring_events(Threads(4), numel=8)   # recorder.ring: the book's ring, 4 thread-ranks
    minidp.trace.save("ring.json", events)     # Perfetto, or: minidp classroom --trace ring.json

A module per thing recorded — ``ring.py`` (the ring, server vs ring, the link), ``dp.py``,
``ddp.py``, ``fsdp.py`` (and HSDP), ``memory.py`` — each on a *world*: anything with
``ProcessWorld``'s ``run(fn, *args, timeout=)`` and ``world_size``, rank processes where time
is shown (``minidp.launch.ProcessWorld``, :class:`Worlds`), thread-ranks with real gloo
groups where values and bytes are (:class:`Threads`). A scene's own events go on the
``classroom`` lane; the library's (``grad ready``, ``all-gather unit 1``, ...) stay as
minidp emits them.

Test: ``pytest tests/test_classroom.py tests/test_demo_ring.py tests/test_diagrams.py``
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

LANE = "classroom"  # the lane of a scene's own events, on each rank's track


def instant(name: str, ts: float, rank: int, lane: str = LANE, **args) -> dict:
    """A point event at ``ts`` (µs, ``minidp.trace.now_us``) on ``rank``'s track."""
    return {"name": name, "ph": "i", "s": "t", "ts": ts, "pid": rank, "tid": lane, "args": args}


def own(events: list[dict], rank: int, skip=("send", "recv")) -> list[dict]:
    """This rank's events (a thread world's recordings see every rank's), less ``skip``."""
    return [e for e in events if e["pid"] == rank and e["name"] not in skip]


def mlp(*sizes: int, act: Callable[[], nn.Module] = nn.ReLU) -> nn.Sequential:
    """``Linear(sizes[0], sizes[1])``, ``act``, ... ``Linear(sizes[-2], sizes[-1])``, seeded:
    every rank, run and picture builds the same weights."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), act()]
    return nn.Sequential(*layers[:-1])


class Threads:
    """A thread world (``minidp.launch.run_threads``) with ``ProcessWorld``'s ``run``."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def run(self, fn: Callable, *args, timeout: float = 60.0) -> list:
        from minidp.launch import run_threads

        return run_threads(fn, self.world_size, *args, timeout=timeout)


class Worlds:
    """Rank-process worlds by size, started on first use and reused; ``close()`` ends them."""

    def __init__(self, progress: Callable[[str], None] = print) -> None:
        self.worlds: dict = {}
        self.progress = progress

    def __call__(self, size: int):
        from minidp.launch import ProcessWorld

        if size not in self.worlds:
            self.progress(f"      starting {size} rank processes (each imports torch) ...")
            self.worlds[size] = ProcessWorld(size, timeout=60.0)
        return self.worlds[size]

    def close(self) -> None:
        for w in self.worlds.values():  # the events are back: no polite teardown to wait for
            w.close(kill=True)
