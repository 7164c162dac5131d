"""What runs inside each rank process that :class:`~minidp.launch.ProcessWorld` starts:
join the parent's ``TCPStore`` and the default group with torchrun's variables set, run the
functions the parent sends over a pipe, send back each result or exception, and exit (with
its children) when the parent is gone.

Test: ``pytest tests/test_launch.py``
"""

from __future__ import annotations

import datetime
import gc
import os
import pickle
import threading
import time
import traceback

import torch
import torch.distributed as dist

from minidp.comm.errors import PeerError
from minidp.launch.leftovers import kill_descendants


def _watch_parent(launcher: int, parent: int) -> None:
    """Exit when the launcher is gone: this rank's parent is it, or the fork server it
    started (which ends with it); either way the parent changes."""
    while True:
        if os.getppid() != parent or (launcher != parent and _gone(launcher)):
            _exit_now()  # do not linger as an orphan
        time.sleep(0.5)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _exit_now() -> None:
    """Leave at once, and take this rank's own children (DataLoader workers) along."""
    kill_descendants(os.getpid())
    os._exit(1)


def worker(rank, world_size, port, backend, timeout, conn, launcher, environ) -> None:
    """A rank's life: join the group, then run ``(fn, args)`` tasks from ``conn`` until None.
    ``environ``: the launcher's environment when it started this rank (``forkserver.py``)."""
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)
    parent = os.getppid()
    threading.Thread(target=_watch_parent, args=(launcher, parent), daemon=True).start()
    env = {
        "RANK": rank,
        "LOCAL_RANK": rank,
        "WORLD_SIZE": world_size,
        "LOCAL_WORLD_SIZE": world_size,
        "GROUP_RANK": 0,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": port,
    }
    os.environ.update({k: str(v) for k, v in env.items()})
    if "OMP_NUM_THREADS" not in os.environ and world_size > 1:
        torch.set_num_threads(1)  # like torchrun: ranks sharing cores should not oversubscribe
    if "nccl" in backend and torch.cuda.is_available():
        # NCCL: one GPU per rank, as torchrun scripts pick with LOCAL_RANK (else all on GPU 0)
        torch.cuda.set_device(rank % torch.cuda.device_count())
    try:
        store = dist.TCPStore(
            "127.0.0.1", port, world_size, False, datetime.timedelta(seconds=timeout)
        )
        dist.init_process_group(
            backend,
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout),
        )
        conn.send(("ready", None))
    except BaseException as exc:
        conn.send(("error", describe(exc)))
        return
    while True:
        try:
            task = conn.recv_bytes()
        except EOFError:  # the parent is gone (killed): no time for a clean exit
            _exit_now()
        try:
            task = pickle.loads(task)  # inside the try: a function this process cannot
            if task is None:  # import is this rank's error, reported like any other
                break
            fn, args = task
            conn.send(("ok", fn(rank, world_size, *args)))
        except BaseException as exc:
            conn.send(("error", describe(exc)))
            conn.close()
            # exit now: closed sockets make blocked peers raise PeerError at once
            _exit_now()
    try:
        destroy_group()
    except Exception:
        pass
    kill_descendants(os.getpid())  # whatever the rank started and left running


def describe(exc: BaseException) -> tuple[str, str, str, bool]:
    return type(exc).__name__, str(exc), traceback.format_exc(), isinstance(exc, PeerError)


def destroy_group() -> None:
    """Collect what still holds the group (DDP's cycles would drop it mid-shutdown, an
    abort), then destroy it, after a sleep that lets gloo's worker release its tensors
    (torch 2.4's destructor waits for it holding the GIL: a deadlock)."""
    gc.collect()
    if dist.is_initialized():
        time.sleep(0.05)
        dist.destroy_process_group()
    gc.collect()
