"""Watching a learner's DDP communication hook: is it still asynchronous, and on which group?

A comm hook exists for overlap: it starts the bucket's all-reduce and returns a Future
that completes *later*, while backward goes on. Two plausible hooks give torch's bits
and still miss the point, and one hangs:

* a **blocking** hook — ``dist.all_reduce(t)`` without ``async_op=True`` (or ``.wait()`` on
  the work) and then an already-completed Future: the gradients are right, the overlap
  is gone;
* a hook that all-reduces on the **default group** instead of ``state``, the group DDP
  was given: with a subgroup that hangs (ranks outside it never join); here it is caught
  at the call, naming the line and both groups.

:class:`HookWatch` (in the rank process that runs the learner's hook, in the sandbox)
wraps ``torch.distributed.all_reduce`` while the hook runs: an ``async_op=True`` call gets
a *gated* Future — completed with the real result only after the hook has returned — so
a Future that is already done when the hook returns cannot be waiting for the
communication it launched.

Test: ``pytest tests/test_exercise_set_b.py -k fp16``
"""

from __future__ import annotations

import functools
import traceback

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


class WrongGroup(RuntimeError):
    """The hook called a collective on another group than the one it was given."""


class _GatedWork:
    """What the wrapped ``all_reduce(..., async_op=True)`` returns inside the hook."""

    def __init__(self, work, gate: torch.futures.Future, watch: HookWatch) -> None:
        self.work, self.gate, self.watch = work, gate, watch

    def get_future(self) -> torch.futures.Future:
        return self.gate

    def wait(self, *args) -> bool:
        if self.watch.inside:
            self.watch.blocking.append(f"{self.watch.line()}: .wait() on the all-reduce")
        return self.work.wait(*args)

    def is_completed(self) -> bool:
        return self.gate.done()


class HookWatch:
    """Wraps ``dist.all_reduce`` for one rank's training with the learner's hook."""

    def __init__(self, state, path: str) -> None:
        self.state, self.path = state, path
        self.inside = False
        self.blocking: list[str] = []  # "line N: ..." for each blocking call in the hook
        self.early = False  # a hook returned a Future that was already done
        self.launched: list[tuple] = []  # (real work, gate) started by the current call
        self._original = dist.all_reduce

    def line(self) -> str:
        frames = [f for f in traceback.extract_stack() if f.filename == self.path]
        return f"line {frames[-1].lineno}: {frames[-1].line}" if frames else "a line not known"

    def _group_name(self, group) -> str:
        if group is None or group is dist.group.WORLD:
            return f"the default group (WORLD, {dist.get_world_size()} ranks)"
        return f"a group of {dist.get_world_size(group)} ranks"

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if not self.inside:
            return self._original(tensor, op=op, group=group, async_op=async_op)
        if group is not self.state:
            raise WrongGroup(
                f"the hook all-reduced on {self._group_name(group)} at {self.line()} — "
                f"expected `state`, the group DDP hands the hook ({self._group_name(self.state)}"
                "). Hint: dist.all_reduce(compressed, group=state, async_op=True); where DDP "
                "runs on a subgroup, the default group's other ranks never join and it hangs"
            )
        if not async_op:
            self.blocking.append(f"{self.line()}: dist.all_reduce without async_op=True")
            return self._original(tensor, op=op, group=group)
        work = self._original(tensor, op=op, group=group, async_op=True)
        gate = torch.futures.Future()
        self.launched.append((work, gate))
        return _GatedWork(work, gate, self)

    def wrap(self, hook):
        """The learner's hook, watched (same signature and annotations: DDP checks them)."""

        @functools.wraps(hook)
        def watched(state, bucket):
            self.inside, self.launched = True, []
            try:
                fut = hook(state, bucket)
            finally:
                self.inside = False
            if isinstance(fut, torch.futures.Future) and fut.done():
                self.early = True
            for work, gate in self.launched:  # only now may the communication complete
                work.get_future().add_done_callback(functools.partial(_open, gate))
            return fut

        return watched

    def __enter__(self) -> HookWatch:
        dist.all_reduce = c10d.all_reduce = self.all_reduce
        return self

    def __exit__(self, *exc) -> None:
        dist.all_reduce = c10d.all_reduce = self._original

    def asynchronous(self) -> bool:
        """Every hook call returned a Future that completed only after its all-reduce."""
        return not self.early and not self.blocking


def _open(gate: torch.futures.Future, done: torch.futures.Future) -> None:
    try:
        gate.set_result(done.value())
    except Exception as exc:  # the collective failed: so does the gate
        gate.set_exception(exc)
