"""Start worlds of ranks: processes (:func:`spawn`, :class:`ProcessWorld`), threads for
fast tests (:func:`run_threads`), and :func:`launch` for scripts that also run under torchrun.

Test: ``pytest tests/test_launch.py``
"""

from minidp.launch.errors import WorkerError
from minidp.launch.leftovers import child_processes
from minidp.launch.processes import ProcessWorld, spawn
from minidp.launch.threads import run_threads
from minidp.launch.torchrun import launch, launched_by_torchrun

__all__ = [
    "ProcessWorld",
    "child_processes",
    "WorkerError",
    "launch",
    "launched_by_torchrun",
    "run_threads",
    "spawn",
]
