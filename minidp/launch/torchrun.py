"""Scripts that run the same way under ``python`` and under ``torchrun``.

Test: ``pytest tests/test_ddp_misc.py tests/test_multinode.py``

``launch(main, world_size=2)`` under ``if __name__ == "__main__":`` spawns the ranks under
``python script.py``; under ``torchrun --nproc-per-node 2 script.py`` (or ``--nnodes 2``)
each process joins the group torchrun describes.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from minidp.launch.checks import check_timeout, check_world_size
from minidp.launch.processes import spawn
from minidp.launch.rank import destroy_group


def launched_by_torchrun() -> bool:
    """True inside a process started by ``torchrun`` (env:// variables present)."""
    return "TORCHELASTIC_RUN_ID" in os.environ and "RANK" in os.environ


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args,
    backend: str = "gloo",
    timeout: float = 60.0,
) -> list:
    """Run ``fn(rank, world_size, *args)`` on every rank, whichever way the script started:
    spawned (every rank's result) or under torchrun (only this rank's entry is filled).
    ``timeout``: seconds a collective may wait, both ways (torch's default is 30 minutes)."""
    world_size = check_world_size("launch", world_size)
    timeout = check_timeout("launch", timeout)
    if not launched_by_torchrun():
        return spawn(fn, world_size, *args, backend=backend, timeout=timeout)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))  # env://
    try:
        rank, size = dist.get_rank(), dist.get_world_size()
        out: list[Any] = [None] * size
        out[rank] = fn(rank, size, *args)
        return out
    finally:
        destroy_group()
