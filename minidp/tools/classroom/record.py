"""Record every classroom scene for real and merge the events into one Chrome trace.

    python -m minidp classroom --no-serve --out /tmp/cls     # records, then builds the page

Each scene is recorded by ``minidp.tools.recorder`` (the runs the demos print and the
diagrams draw), one after the other with a progress line each, and merged by
``minidp.trace.to_chrome``, the options under ``otherData``. Where time is what a scene
teaches (ring, traffic, DDP, FSDP, HSDP) its ranks are processes: one ``ProcessWorld`` per
size, started once and reused (the ring's also measures the link's α and β for the page's
models); DataParallel is threads by design, and the memory scene shows bytes: threads too,
and the page says so.

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from minidp import trace
from minidp.tools.recorder import Threads, Worlds, mlp
from minidp.tools.recorder.ddp import cap_for, ddp_events
from minidp.tools.recorder.dp import dp_events
from minidp.tools.recorder.fsdp import check_shape, fsdp_events, hsdp_events
from minidp.tools.recorder.memory import memory_events
from minidp.tools.recorder.ring import link_events, ring_events, traffic_events

SCENE_ORDER = ("ring", "traffic", "dp", "ddp", "memory", "fsdp", "hsdp")
MODELLED = ("ring", "traffic", "ddp", "fsdp", "hsdp")  # scenes whose page shows α-β models


@dataclasses.dataclass
class Options:
    """What to record: the sizes every scene uses."""

    world_size: int = 4  # ranks of the ring and the traffic scene
    numel: int = 8  # elements of the ring's tensor (values shown in every chunk)
    traffic_numel: int = 1024  # elements all-reduced by server and ring
    devices: int = 4  # DataParallel's simulated devices
    batch: int = 8  # DataParallel's batch
    ddp_world: int = 2  # ranks of the DDP, memory and FSDP scenes
    width: int = 64  # width of the MLP in the DDP/memory/FSDP/HSDP scenes
    hsdp_mesh: tuple[int, int] = (2, 2)  # HSDP: (nodes, ranks per node), one process each
    only: tuple[str, ...] = SCENE_ORDER

    def check(self) -> None:
        unknown = [s for s in self.only if s not in SCENE_ORDER]
        if unknown or not self.only:
            raise ValueError(f"classroom: unknown scene(s) {unknown}; choose from {SCENE_ORDER}")
        if "ring" in self.only or "traffic" in self.only:
            if self.world_size < 2:
                raise ValueError(
                    f"classroom: --world-size must be at least 2 for the ring (got "
                    f"{self.world_size}): a ring needs two ranks"
                )
            if self.world_size > 8:
                raise ValueError(
                    f"classroom: --world-size above 8 (got {self.world_size}): one process per "
                    "rank, and the ring's values must fit a projector"
                )
        if "ring" in self.only and not self.world_size <= self.numel <= 32:
            raise ValueError(
                f"classroom: --numel must be between --world-size ({self.world_size}) and 32, "
                f"got {self.numel}"
            )
        if self.ddp_world < 2:
            raise ValueError(
                f"classroom: --ddp-world-size must be at least 2, got {self.ddp_world}"
            )
        if self.ddp_world > 8:
            raise ValueError(
                f"classroom: --ddp-world-size above 8 (got {self.ddp_world}): one process "
                "per rank, and the timelines must fit a projector"
            )
        if self.width < 8:
            raise ValueError(f"classroom: --width must be at least 8, got {self.width}")
        if "dp" in self.only and not 1 <= self.devices <= self.batch:
            raise ValueError(
                f"classroom: --devices must be between 1 and --batch ({self.batch}), got "
                f"{self.devices}"
            )
        if "hsdp" in self.only:
            check_shape(self.hsdp_mesh)


def _dp(o: Options) -> list[dict]:
    """The DP scene: a 3 -> 4 -> 2 MLP, so every value fits on a projector."""
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(o.batch, 3, generator=g), torch.randn(o.batch, 2, generator=g)
    return dp_events(mlp(3, 4, 2), x, y, ["cpu"] * o.devices)


def _runners(o: Options, world: Callable) -> dict[str, Callable[[], list[dict]]]:
    ring, w = o.world_size, o.width
    ddp = (2 * w,) * 4 + (4,)  # the DDP scene's MLP: twice as wide, so backward takes time
    return {
        "ring": lambda: ring_events(world(ring), o.numel),
        "traffic": lambda: traffic_events(world(ring), o.traffic_numel),
        "dp": lambda: _dp(o),
        "ddp": lambda: ddp_events(world(o.ddp_world), ddp, cap_for(ddp, buckets=3)),
        "memory": lambda: memory_events(Threads(o.ddp_world), (w,) * 4 + (4,)),
        "fsdp": lambda: fsdp_events(world(o.ddp_world), (w,) * 4 + (4,)),
        "hsdp": lambda: hsdp_events(world(o.hsdp_mesh[0] * o.hsdp_mesh[1]), o.hsdp_mesh, w),
    }


def record(
    options: Options | None = None, progress: Callable[[str], None] = print, world=None
) -> dict:
    """Record the chosen scenes; returns a Chrome trace dict (``traceEvents`` and more).

    ``world``: ``size -> minidp.launch.ProcessWorld``, open worlds to run on (the tests
    pass their session's); ``None``: worlds are started here and closed at the end."""
    o = options or Options()
    o.check()
    own = Worlds(progress) if world is None else None
    runners = _runners(o, own or world)
    events: list[dict] = []
    chosen = [s for s in SCENE_ORDER if s in o.only]
    try:
        for i, scene in enumerate(chosen, 1):
            progress(f"[{i}/{len(chosen)}] recording {scene} ...")
            t0 = time.perf_counter()
            events += runners[scene]()
            progress(f"[{i}/{len(chosen)}] {scene}: done in {time.perf_counter() - t0:.1f} s")
        if any(s in MODELLED for s in chosen):
            size = o.hsdp_mesh[0] * o.hsdp_mesh[1]  # a world already started: no new one
            if {"ddp", "fsdp"} & set(chosen):
                size = o.ddp_world
            if {"ring", "traffic"} & set(chosen):
                size = o.world_size
            events += link_events((own or world)(size))
            progress("      link measured (ping-pong, for the page's α-β models)")
    finally:
        if own is not None:
            own.close()
    data = trace.to_chrome(events)
    data["otherData"] = {"recorded_by": "python -m minidp classroom", "scenes": chosen,
                         "options": dataclasses.asdict(o)}  # fmt: skip
    return data
