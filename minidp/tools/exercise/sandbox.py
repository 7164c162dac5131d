"""The sandbox: the one process that runs the code under check (no expected value here).

Forked by the zygote, it puts the guards up, imports each file with a deadline, runs every
case on gloo ranks and writes frames to fd 3 (``wire.py``): ``file`` per file, ``case`` per
case (answers as data, an error, or where each rank was stuck), ``done``. Thread ranks come
from ``minidp.launch.run_threads``, one world for many cases; for torch DDP: forked ranks."""

import importlib.util
import linecache
import os
import re
import sys
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import torch.distributed as dist

from minidp.comm.group import resolve
from minidp.launch import run_threads
from minidp.tools.exercise import guards, wire
from minidp.tools.exercise.catalogue import find
from minidp.tools.exercise.learner_group import DefaultGroup, PostOffice, View, Wire, guarded
from minidp.tools.exercise.ranks import GRACE_S, run_ranks, where_in_dump
from minidp.tools.exercise.spec import SOLUTIONS

OUTER_S = 3600.0  # gloo's own timeout on thread ranks: a case's deadline comes first


class LoadError(Exception):
    pass


def load(path: str, name: str, deadline: float):
    """Import ``path`` in a helper thread, within ``deadline``; its function ``name``."""
    spec = importlib.util.spec_from_file_location(f"minidp_exercise_{name}", path)
    module, box = importlib.util.module_from_spec(spec), []

    def target() -> None:
        try:
            spec.loader.exec_module(module)
        except BaseException as exc:  # SystemExit too: it must not end the check as "exit 0"
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)  # (one still running at the
    thread.start()  # deadline runs on: the sandbox is killed once it is done)
    thread.join(deadline)
    if thread.is_alive():
        raise LoadError(
            f"could not import {path}: the import did not finish within {deadline:g}s, still "
            f"running at {where(thread, path)}. Hint: code at module level runs when the "
            "checker imports your file — move a loop there into the function or under "
            "`if __name__ == '__main__':`")  # fmt: skip
    exc = box[0] if box else None
    if isinstance(exc, SystemExit):
        raise LoadError(
            f"could not import {path}: it called sys.exit({exc.code!r}) while being imported"
            f"{learner_line(exc, path)}. Hint: the checker imports your file and calls your "
            "function — remove it (or put it under `if __name__ == '__main__':`)")  # fmt: skip
    if isinstance(exc, guards.Tampering):
        raise exc
    if exc is not None:
        at = learner_line(exc, path)
        raise LoadError(f"could not import {path}: {type(exc).__name__}: {exc}{at}")
    if not callable(getattr(module, name, None)):
        raise LoadError(f"{path} defines no function {name}(...) — keep the stub's signature")
    return getattr(module, name)


def learner_line(exc, path: str) -> str:
    """`` (line N: code)``: the deepest line of the learner's file in the traceback."""
    text = exc[2] if isinstance(exc, tuple) else "".join(traceback.format_tb(exc.__traceback__))
    hits = re.findall(rf'File "{re.escape(path)}", line (\d+).*\n\s*(.*)', text)
    return f" (line {hits[-1][0]}: {hits[-1][1].strip()})" if hits else ""


def where(thread: threading.Thread, focus: str) -> str:
    """Where ``thread`` is: its innermost frame in ``focus`` (else its innermost), counters."""
    frame = innermost = sys._current_frames().get(thread.ident)
    while frame is not None and frame.f_code.co_filename != focus:
        frame = frame.f_back
    frame = frame or innermost
    if frame is None:
        return "finished"
    code = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    ints = [f"{k}={v}" for k, v in frame.f_locals.items() if type(v) is int and k[0] != "_"]
    return f"line {frame.f_lineno}: {code}" + (f"  ({', '.join(ints)})" if ints else "")


def error_frame(errors: dict, path: str) -> dict:
    """The first rank's own error (not a peer's); the stub's NotImplementedError: ``todo``."""
    rank, (kind, text, tb) = min(({r: e for r, e in errors.items() if e[0] != "PeerError"}
                                  or errors).items())  # fmt: skip
    if kind == "NotImplementedError":
        return {"status": "todo"}
    said = text if text.startswith(f"rank {rank} ") else f"rank {rank} raised {kind}: {text}"
    return {"status": "error", "error": f"{kind}: {text}",
            "detail": said + learner_line((kind, text, tb), path)}  # fmt: skip


def stuck_frame(stuck: dict[int, str], deadline: float) -> dict:
    lines = [f"rank {r} still running, at {at}" for r, at in sorted(stuck.items())]
    if all(".send(" in at for at in stuck.values()):
        lines.append("hint (blocking sends): every stuck rank waits in a blocking send, which "
                     "completes only once its receiver has posted the receive. Start the send "
                     "with p2p.isend(...), then recv, then .wait() the send (or let one side "
                     "receive first).")  # fmt: skip
    return {"status": "stuck", "detail": "\n".join([
        f"ranks {sorted(stuck)} did not finish within {deadline:g}s — a deadlock: a send "
        "nobody receives, or a recv nobody sends to?", *lines])}  # fmt: skip


def ok_frame(answers: list, traffic: list | None) -> dict:
    """Every rank's answer as data (or the error of one that would not turn into data)."""
    notes: list[str] = []
    try:
        ranks = [{"got": wire.encode(got, notes), "traffic": traffic[r] if traffic else None}
                 for r, got in enumerate(answers)]  # fmt: skip
    except Exception as exc:  # the learner's object would not turn into data
        text = f"could not read your answer: {type(exc).__name__}: {exc}"
        return {"status": "error", "error": text, "detail": text}
    for n in notes:
        guards.note(n)
    return {"status": "ok", "ranks": ranks}


class _World:
    """One thread world (in a thread of its own) running the tasks from ``start`` on."""

    def __init__(self, run, start: int) -> None:
        self.run, self.tasks, self.start = run, run.tasks, start
        self.size = max(c["world"] + c.get("spare", 0) for _, _, c in self.tasks[start:])
        self.barrier, self.lock = threading.Barrier(self.size), threading.Lock()
        self.threads, self.ended = {}, threading.Event()  # rank -> its thread; the world ended
        self.now: tuple[int, float] | None = None  # (task, started): the case running
        self.office, self.answers, self.errors, self.failed_at = PostOffice(), {}, {}, 0.0
        self.live, self.broken, self.next = True, None, len(self.tasks)
        threading.Thread(target=self._go, daemon=True).start()

    def _go(self) -> None:
        try:
            run_threads(self._rank, self.size, timeout=OUTER_S)
        except Exception as exc:  # not the learner's (caught per case): the world failed
            self.broken = ("WorkerError", f"the thread world failed: {exc}", "")
        self.ended.set()

    def _rank(self, rank: int, size: int) -> None:
        group, self.threads[rank] = resolve(), threading.current_thread()
        try:
            for t in range(self.start, len(self.tasks)):
                self.barrier.wait()  # (a): everyone has seen the last case's end
                j, _, case = self.tasks[t]
                if self.next <= t:
                    return
                if j in self.run.skip:
                    continue
                if rank == 0:
                    self.office, self.answers, self.errors = PostOffice(), {}, {}
                    with self.lock:
                        self.now = (t, time.monotonic())
                self.barrier.wait()  # (b): everyone sees this case's post office
                w, s = case["world"], case.get("spare", 0)
                if s <= rank < s + w:
                    wire_ = Wire(group, self.office)
                    view = View(wire_, list(range(s, s + w)))
                    fn = guarded(self.run.fns[j], wire_, view if not s else DefaultGroup(w + s, w))
                    try:
                        self.answers[rank - s] = (self.run.learn(fn, case, rank - s, w, view),
                                                  dict(wire_.counts))  # fmt: skip
                    except BaseException as exc:  # as text: the exception holds the group
                        with self.lock:
                            error = (type(exc).__name__, str(exc), traceback.format_exc())
                            self.errors[rank - s], self.failed_at = error, time.monotonic()
                self.barrier.wait()  # (c): every rank's answer (or error) is in
                if rank == 0:
                    self._end(t)
        except threading.BrokenBarrierError:
            return  # the watcher gave this world up

    def _end(self, t: int) -> None:
        left = self.office.unmatched()
        if left:  # a message in flight would meet the next case: a new world after this one
            self.next = t + 1
        text = "; ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        if self.errors:
            frame = error_frame(self.errors, self.run.paths[self.tasks[t][0]])
        elif left:
            frame = {"status": "error", "error": f"UnmatchedMessage: {text}", "detail": text}
        else:
            got = [self.answers[r] for r in range(len(self.answers))]
            frame = ok_frame([a for a, _ in got], [c for _, c in got])
        self.finish(t, frame)

    def finish(self, t: int, frame: dict) -> None:
        with self.lock:
            if self.live and self.now is not None and self.now[0] == t:
                j, i, _ = self.tasks[t]
                self.run.send({"kind": "case", "j": j, "i": i, **frame})
                if frame["status"] == "todo":
                    self.run.skip.add(j)
            self.now = None

    def watch(self) -> int:
        """Until done, stuck or given up (``GRACE_S`` after a raise): where the next starts."""
        while not self.ended.wait(0.02):
            with self.lock:
                now, t = time.monotonic(), self.now and self.now[0]
                late = t is not None and now - self.now[1] > self.run.deadline
                if late or (t is not None and self.errors and now - self.failed_at > GRACE_S):
                    break
        else:  # the world ended: every case done, or it failed
            if self.broken is None:
                return self.next
            if self.now is None:
                self.now = (self.start, time.monotonic())
            self.errors.setdefault(0, self.broken)
            t = self.now[0]
        path = self.run.paths[self.tasks[t][0]]
        if self.errors:
            self.finish(t, error_frame(self.errors, path))
        else:  # still running at the deadline: where is each rank? Then end.
            s, case = self.tasks[t][2].get("spare", 0), self.tasks[t][2]
            running = [r for r in range(s, s + case["world"]) if r - s not in self.answers]
            self.finish(t, stuck_frame({r - s: where(self.threads[r], path) for r in running},
                                       self.run.deadline))  # fmt: skip
            self.run.send({"kind": "done"})
            os._exit(0)  # ranks still blocked or spinning cannot be stopped: end them all
        with self.lock:
            self.live = False  # a rank still blocked here may wake later: it sends nothing
        self.barrier.abort()
        return t + 1


def on_threads(run) -> None:
    """Every (file, case) in order on thread worlds: one until it is given up, then a new one."""
    start, tasks, skip = 0, run.tasks, run.skip
    while rest := [t for t in range(start, len(tasks)) if tasks[t][0] not in skip]:
        start = _World(run, rest[0]).watch()


def on_processes(run) -> None:
    """A world of forked ranks runs the tasks until one fails; the next, a new one."""
    tasks = run.tasks
    while tasks := [task for task in tasks if task[0] not in run.skip]:
        size = max(c["world"] + c.get("spare", 0) for _, _, c in tasks)
        jobs = [(run.learn, run.fns[j], c) for j, _, c in tasks]
        runs = run_ranks(_job, size, jobs, run.deadline)
        for (j, i, case), ran in zip(tasks, runs):
            s, path = case.get("spare", 0), run.paths[j]
            if ran.stuck:
                at = {r - s: where_in_dump(d, path) for r, d in ran.stuck.items()}
                frame = stuck_frame(at, run.deadline)
            elif ran.errors:
                frame = error_frame({r - s: e for r, e in ran.errors.items()}, path)
            else:
                frame = ok_frame(ran.values[s : s + case["world"]], None)
            run.send({"kind": "case", "j": j, "i": i, **frame})
            if frame["status"] == "stuck":
                run.send({"kind": "done"})
                os._exit(0)
            run.skip |= {j} if frame["status"] == "todo" else set()
        tasks = tasks[len(runs) :]


def _job(rank: int, world: int, task: tuple):
    learn, fn, case = task
    w, s = case["world"], case.get("spare", 0)
    group = dist.new_group(list(range(s, s + w))) if (w, s) != (world, 0) else dist.group.WORLD
    return learn(fn, case, rank - s, w, group) if s <= rank < s + w else None


def main(payload: dict, fd: int) -> None:
    exercise = find(payload["name"])
    paths = [str(Path(p).resolve()) for p in payload["paths"]]
    deadline, lock = payload["deadline"], threading.Lock()
    guards.refuse_answers(exercise.answers)
    guards.install(paths, str(SOLUTIONS))
    seal = guards.Seal()  # after the refusals (they re-point names on purpose), before any file

    def send(frame: dict) -> None:
        if finding := seal.broken("while it ran"):
            guards.note(finding)
        with lock:
            wire.write_frame(fd, {**frame, "tamper": list(guards.FINDINGS)})

    fns = {}
    for j, path in enumerate(paths):
        try:
            fns[j] = load(path, exercise.name, deadline)
            send({"kind": "file", "j": j})
        except (LoadError, guards.Tampering) as exc:
            text = str(exc) if isinstance(exc, LoadError) else f"could not import {path}: {exc}"
            send({"kind": "file", "j": j, "load_error": text})
    every = [(j, i, case) for j in fns for i, case in enumerate(payload["cases"])]
    run = SimpleNamespace(learn=exercise.learn, fns=fns, paths=paths, tasks=every, skip=set(),
                          deadline=deadline, send=send)  # fmt: skip
    (on_processes if exercise.processes else on_threads)(run)
    send({"kind": "done"})
