"""Rank processes by ``fork``: real ``torch.distributed`` ranks in milliseconds (``minidp.launch``
spawns: a torch and ``torch._dynamo`` import per rank, seconds). Each joins gloo through a
``FileStore`` and runs ``job(rank, world, task)`` per task; past ``deadline`` a task is stuck
(each rank dumps its stack); one that raised ends the world."""

import contextlib
import datetime
import faulthandler
import linecache
import os
import pickle
import re
import select
import shutil
import signal
import struct
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch.distributed as dist

from minidp.tools.exercise.wire import read_exactly

GRACE_S = 0.4  # after a rank raised, how long the others get to report too


@dataclass
class Run:
    """One task on every rank: values, or errors (type, message, traceback) and stack dumps."""

    values: list[Any]
    errors: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    stuck: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.stuck


def _rank(rank, world, tmp, fd, deadline, job, tasks) -> None:
    store, timeout = dist.FileStore(f"{tmp}/store", world), datetime.timedelta(seconds=deadline + 1)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    for task in tasks:
        with open(f"{tmp}/stack{rank}", "w") as stacks:
            faulthandler.dump_traceback_later(deadline, file=stacks)
            try:
                message = ("ok", job(rank, world, task))
            except BaseException as exc:  # noqa: BLE001 - reported, whatever it is
                message = ("error", (type(exc).__name__, str(exc), traceback.format_exc()))
            faulthandler.cancel_dump_traceback_later()
        send(fd, message)
        if message[0] == "error":
            return  # closing our sockets makes peers waiting on us fail now
    dist.barrier()  # nobody leaves (closing its sockets) while a peer still reads


def send(fd: int, obj) -> None:
    data = pickle.dumps(obj)
    os.write(fd, struct.pack(">Q", len(data)) + data)


def receive(fd: int, timeout: float) -> Any:
    """What :func:`send` wrote (pickled: only the checker writes there); None if it died."""
    try:
        head = read_exactly(fd, 8, time.monotonic() + timeout)
        return pickle.loads(read_exactly(fd, struct.unpack(">Q", head)[0], time.monotonic() + 5))
    except Exception:  # noqa: BLE001
        return None


def where_in_dump(dump: str, focus: str) -> str:
    """The innermost line of ``focus`` in a faulthandler dump, else the first line there."""
    lines = re.findall(r'File "(.*)", line (\d+) in (\S+)', dump)
    for file, line, _ in lines:  # most recent call first
        if file == focus:
            return f"line {line}: {linecache.getline(file, int(line)).strip()}"
    return f"{Path(lines[0][0]).name} line {lines[0][1]} in {lines[0][2]}" if lines else "?"


def run_ranks(job, world: int, tasks: list, deadline: float) -> list[Run]:
    """``world`` forked ranks run ``job(rank, world, task)`` per task: a :class:`Run` each."""
    tmp, pids, fds = tempfile.mkdtemp(prefix="minidp-ranks-"), [], []
    for rank in range(world):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the rank: never returns
            code = 0
            try:
                for other in [r, *fds]:
                    os.close(other)
                _rank(rank, world, tmp, w, deadline, job, tasks)
            except BaseException:  # noqa: BLE001
                code = 70
            finally:
                os._exit(code)
        os.close(w)
        pids.append(pid)
        fds.append(r)
    runs = []
    try:
        while len(runs) < len(tasks) and (not runs or runs[-1].ok):
            run, pending = Run([None] * world), set(range(world))
            until = time.monotonic() + deadline
            while pending:
                wait = max(until - time.monotonic(), 0)
                ready = select.select([fds[r] for r in pending], [], [], wait)[0]
                if not ready:
                    break
                for rank in [r for r in pending if fds[r] in ready]:
                    pending.discard(rank)
                    died = ("error", ("exit", f"rank {rank} died", ""))
                    kind, value = receive(fds[rank], 5.0) or died
                    if kind == "ok":
                        run.values[rank] = value
                    else:
                        run.errors[rank], until = value, min(until, time.monotonic() + GRACE_S)
            if pending and not run.errors:
                time.sleep(0.3)  # the ranks' deadline dumps land now
                run.stuck = {r: Path(f"{tmp}/stack{r}").read_text() for r in sorted(pending)}
            runs.append(run)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        for fd in fds:
            os.close(fd)
        shutil.rmtree(tmp, ignore_errors=True)
    return runs
