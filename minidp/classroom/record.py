"""Run every classroom scene for real and merge the events into one Chrome trace.

    python -m minidp classroom --no-serve --out /tmp/cls     # records, then builds the page

Each scene's recorder (``rec_comm``, ``rec_dp``, ``rec_ddp``, ``rec_shard``, ``rec_hsdp``)
runs real ranks and returns ``minidp.trace`` events; here they are run one after the other, with a
progress line per scene, and merged by ``minidp.trace.to_chrome`` — the same format
``minidp.trace.save`` writes — plus the options under ``otherData`` (the Chrome trace
format's place for such metadata).

Test: ``pytest tests/test_classroom.py``
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from minidp import trace
from minidp.classroom import rec_comm, rec_ddp, rec_dp, rec_hsdp, rec_shard

SCENE_ORDER = ("ring", "traffic", "dp", "ddp", "memory", "fsdp", "hsdp")


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
            if self.world_size > 6:
                raise ValueError(
                    f"classroom: --world-size above 6 (got {self.world_size}) does not fit "
                    "the ring's readable values on a projector"
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
        if self.width < 8:
            raise ValueError(f"classroom: --width must be at least 8, got {self.width}")
        if "hsdp" in self.only:
            rec_hsdp.check_shape(self.hsdp_mesh)


def _runners(o: Options, world=None) -> dict[str, Callable[[], list[dict]]]:
    return {
        "ring": lambda: rec_comm.ring_events(o.world_size, o.numel),
        "traffic": lambda: rec_comm.traffic_events(o.world_size, o.traffic_numel),
        "dp": lambda: rec_dp.dp_events(o.devices, o.batch),
        "ddp": lambda: rec_ddp.ddp_events(o.ddp_world, width=o.width * 2, cap_mb=0.06),
        "memory": lambda: rec_shard.memory_events(o.ddp_world, o.width),
        "fsdp": lambda: rec_shard.fsdp_events(o.ddp_world, o.width),
        "hsdp": lambda: rec_hsdp.hsdp_events(o.hsdp_mesh, o.width, world),
    }


def record(
    options: Options | None = None, progress: Callable[[str], None] = print, world=None
) -> dict:
    """Record the chosen scenes; returns a Chrome trace dict (``traceEvents`` and more).

    ``world``: an open ``minidp.launch.ProcessWorld`` of R x S ranks for the HSDP scene (the
    tests reuse theirs); ``None``: the scene spawns its processes (a few seconds)."""
    o = options or Options()
    o.check()
    runners = _runners(o, world)
    events: list[dict] = []
    chosen = [s for s in SCENE_ORDER if s in o.only]
    for i, scene in enumerate(chosen, 1):
        progress(f"[{i}/{len(chosen)}] recording {scene} ...")
        t0 = time.perf_counter()
        events += runners[scene]()
        progress(f"[{i}/{len(chosen)}] {scene}: done in {time.perf_counter() - t0:.1f} s")
    data = trace.to_chrome(events)
    data["otherData"] = {"recorded_by": "python -m minidp classroom", "scenes": chosen,
                         "options": dataclasses.asdict(o)}  # fmt: skip
    return data
