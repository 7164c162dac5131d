"""Rank processes by ``fork``: a world of real ``torch.distributed`` ranks in milliseconds.

Exercises whose torch component needs a full ``ProcessGroup`` (torch DDP, ZeRO) run on
rank processes. ``minidp.launch.ProcessWorld`` starts them with "spawn": every rank
imports torch again, a second or more each. The checker's processes (a sandbox, a
reference worker) are forked from the zygote with torch already imported and no thread
or group of their own yet, so they can fork their ranks in turn: :func:`run_ranks` forks
``world`` processes, each joins a gloo default group through a ``FileStore`` (no server
thread in the forking process), runs ``job(rank, world, *args)``, meets the others at a
barrier and hands back its pickled result on a pipe.

A rank still running at the deadline is reported with the line it is at: each rank arms
``faulthandler.dump_traceback_later`` for the deadline, and the innermost frame of the
``focus`` file in that dump is the rank's line. Then every rank is killed. A rank ends
with ``os._exit``: no interpreter teardown, no gloo destructor to wait for.

Test: ``pytest tests/test_exercises_dp_ddp.py`` (through the DDP exercises)
"""

from __future__ import annotations

import datetime
import faulthandler
import linecache
import os
import pickle
import re
import select
import signal
import struct
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist

from minidp.tools.exercise.world import GRACE_S, Run

GROUP_SLACK_S = 1.0  # gloo's own timeout: just past the deadline


class RemoteError(Exception):
    """A rank process's exception: its type's name, message and traceback text."""

    def __init__(self, type_name: str, message: str, traceback_text: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.traceback_text = traceback_text


def _write(fd: int, data: bytes) -> None:
    view = memoryview(struct.pack(">Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _rank_main(rank, world, store_path, fd, stack_path, deadline, job, args) -> None:
    with open(stack_path, "w") as stack_file:
        faulthandler.dump_traceback_later(deadline, file=stack_file)
        try:
            dist.init_process_group(
                "gloo",
                store=dist.FileStore(store_path, world),
                rank=rank,
                world_size=world,
                timeout=datetime.timedelta(seconds=deadline + GROUP_SLACK_S),
            )
            value = job(rank, world, *args)
            dist.barrier()  # nobody leaves (closing its sockets) while a peer still reads
            payload = pickle.dumps(("ok", value))
        except BaseException as exc:  # noqa: BLE001 - reported, whatever it is
            payload = pickle.dumps(("error", (type(exc).__name__, str(exc),
                                              traceback.format_exc())))  # fmt: skip
        faulthandler.cancel_dump_traceback_later()
    _write(fd, payload)


def _fork_rank(rank, world, store_path, stack_path, deadline, job, args, others) -> tuple:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the rank: never returns
        code = 0
        try:
            os.close(r)
            for fd in others:
                os.close(fd)
            _rank_main(rank, world, store_path, w, stack_path, deadline, job, args)
        except BaseException:  # noqa: BLE001
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _read_result(fd: int, until: float):
    """One rank's (kind, value), read by its length (a process the learner forked may hold
    the pipe open: EOF is not waited for); None if the rank died before writing it."""

    def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            wait = until - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
            chunk = os.read(fd, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    head = exactly(8)
    body = exactly(struct.unpack(">Q", head)[0]) if head else None
    return pickle.loads(body) if body is not None else None


def where_in_dump(stack_path: str, focus: str) -> str:
    """The innermost line of ``focus`` in a faulthandler dump ("line 23: code"), or what
    the main thread was running."""
    try:
        text = Path(stack_path).read_text()
    except OSError:
        return "a line not known (no stack dump)"
    lines = re.findall(r'File "(.*)", line (\d+) in (\S+)', text)
    for path, line, _ in lines:  # most recent call first, every thread
        if focus and path == focus:
            return f"line {line}: {linecache.getline(path, int(line)).strip()}"
    if lines:
        path, line, fn = lines[0]
        return f"{Path(path).name} line {line} in {fn}"
    return "a line not known"


def run_ranks(job: Callable, world: int, args: tuple, deadline: float, focus: str = "") -> Run:
    """Fork ``world`` rank processes running ``job(rank, world, *args)``; collect their
    results (``Run``: values, errors as :class:`RemoteError`, stuck ranks with their
    line). Must be called from a process with no other threads and no process group."""
    tmp = tempfile.mkdtemp(prefix="minidp-ranks-")
    store = os.path.join(tmp, "store")
    stacks = [os.path.join(tmp, f"stack{r}") for r in range(world)]
    pids, fds = [], []
    for rank in range(world):
        pid, fd = _fork_rank(rank, world, store, stacks[rank], deadline, job, args, fds)
        pids.append(pid)
        fds.append(fd)
    run = Run(values=[None] * world)
    pending = dict(enumerate(fds))
    end = time.monotonic() + deadline
    while pending:
        ready, _, _ = select.select(list(pending.values()), [], [], max(end - time.monotonic(), 0))
        if not ready:
            break
        for rank, fd in list(pending.items()):
            if fd not in ready:
                continue
            del pending[rank]
            result = _read_result(fd, time.monotonic() + 5.0)
            if result is None:
                run.errors[rank] = RemoteError("exit", f"rank {rank} died", "")
            elif result[0] == "ok":
                run.values[rank] = result[1]
            else:
                run.errors[rank] = RemoteError(*result[1])
            if rank in run.errors:
                end = min(end, time.monotonic() + GRACE_S)
    if pending:
        time.sleep(0.3)  # the ranks' own deadline dumps land now
    for rank in pending:
        run.stuck[rank] = where_in_dump(stacks[rank], focus)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    for fd in fds:
        os.close(fd)
    for path in [store, *stacks]:
        Path(path).unlink(missing_ok=True)
    os.rmdir(tmp)
    return run
