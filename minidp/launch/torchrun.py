"""Scripts that run the same way under ``python`` and under ``torchrun``.

    def main(rank, world_size): ...
    if __name__ == "__main__":
        minidp.launch.launch(main, world_size=2)

``python script.py`` spawns the ranks itself (:func:`minidp.launch.spawn`);
``torchrun --nproc-per-node 2 script.py`` (or ``--nnodes 2`` on two machines) starts the
processes, and :func:`launch` joins the group torchrun describes in the environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

Test: ``pytest tests/test_ddp_misc.py tests/test_multinode.py``
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
    """Run ``fn`` on every rank, whichever way the script was started.

    * ``python script.py``: spawns ``world_size`` ranks with :func:`spawn`; returns every
      rank's result.
    * ``torchrun --nproc-per-node N script.py``: this process *is* one rank; joins the
      default group from the env:// variables, runs ``fn(rank, world_size, *args)`` and
      returns a list where only this rank's entry is filled.

    ``timeout``: seconds any collective may wait, both ways (torch's own default for a
    group is 30 minutes: a stalled rank would hold the others that long under torchrun).
    """
    world_size = check_world_size("launch", world_size)
    timeout = check_timeout("launch", timeout)
    if not launched_by_torchrun():
        return spawn(fn, world_size, *args, backend=backend, timeout=timeout)
    # env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    try:
        rank, size = dist.get_rank(), dist.get_world_size()
        out: list[Any] = [None] * size
        out[rank] = fn(rank, size, *args)
        return out
    finally:
        destroy_group()
