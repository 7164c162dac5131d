"""Where rank processes start from: a server process that imported torch once, forking each.

Test: ``pytest tests/test_launch.py``

A ``spawn``-ed rank is a new interpreter that imports torch again: seconds of CPU per rank,
every time. multiprocessing's ``forkserver`` starts one clean process (no threads, no
process group, nothing of the launcher's) that imports torch, then forks a rank from it on
request: the rank still imports the script (``__main__``) and gets its arguments pickled,
exactly as under ``spawn``, but torch is already there. Where there is no fork server
(Windows), ranks are spawned.

The server keeps the environment it started with: a rank gets the launcher's at launch
and restores it first, as a spawned rank has it (``worker`` in ``rank.py``).
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing import forkserver

PRELOAD = ["torch", "torch.distributed"]  # what every rank needs; no CUDA is initialised


def context():
    """The multiprocessing context rank processes start in."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # (kept only if the server is not running yet)
    return ctx


def ensure_running() -> None:
    """Start the server now (it then outlives every world: a child of this process, once)."""
    if context().get_start_method() == "forkserver":
        forkserver.ensure_running()
