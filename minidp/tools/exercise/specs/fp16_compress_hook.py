"""``fp16_compress_hook`` (lesson 22) vs torch DDP with torch's hook: two steps on 100-byte
buckets (one, then three rebuilt), every gradient ``torch.equal``, on the case's group."""

import functools
import traceback
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from minidp.tools.exercise.learner_group import WrongGroup
from minidp.tools.exercise.spec import Exercise, Expected
from minidp.tools.exercise.specs import ddp


class HookWatch:
    """``dist.all_reduce`` in the hook: on another group than ``state`` it raises (it would hang);
    synchronous or waited for in the hook it is blocking; else its Future completes only after
    the hook returned — a Future already done at return did not wait for it."""

    def __init__(self, state, path: str) -> None:
        self.state, self.path, self.real = state, path, dist.all_reduce
        self.blocking, self.gates = False, None  # gates: while the hook runs

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if self.gates is None:  # outside the hook: DDP's own
            return self.real(tensor, op=op, group=group, async_op=async_op)
        if group is not self.state:
            at = [f"line {f.lineno}: {f.line}" for f in traceback.extract_stack()
                  if f.filename == self.path][-1:] or ["a line not known"]  # fmt: skip
            default = group in (None, dist.group.WORLD)
            on = "the default group (WORLD, " if default else "a group of "
            n, given = dist.get_world_size(group), dist.get_world_size(self.state)
            raise WrongGroup(
                f"the hook all-reduced on {on}{n} ranks) at {at[0]} — expected `state`, the "
                f"group DDP hands the hook (a group of {given} ranks). Hint: "
                "dist.all_reduce(compressed, group=state, async_op=True)")  # fmt: skip
        work, gate = self.real(tensor, op=op, group=group, async_op=True), torch.futures.Future()
        self.blocking |= not async_op
        if not async_op:
            return work.wait() and None
        self.gates.append((work, gate))

        def wait(*args):
            self.blocking |= self.gates is not None
            return work.wait(*args)

        return SimpleNamespace(get_future=lambda: gate, wait=wait, is_completed=gate.done)

    def wrap(self, hook):
        """The learner's hook, watched (same signature and annotations: DDP checks them)."""

        @functools.wraps(hook)
        def watched(state, bucket):
            self.gates = []
            try:
                fut = hook(state, bucket)
            finally:
                gates, self.gates = self.gates, None
            self.blocking |= isinstance(fut, torch.futures.Future) and fut.done()
            for work, gate in gates:  # only now may the communication complete
                work.get_future().add_done_callback(functools.partial(_open, gate))
            return fut

        return watched


def _open(gate: torch.futures.Future, done: torch.futures.Future) -> None:
    try:
        gate.set_result(done.value())
    except Exception as exc:  # the collective failed: so does the gate
        gate.set_exception(exc)


def _train(hook, case, rank: int, group) -> list:
    """Two steps of the float32 MLP through torch DDP with ``hook``: every gradient."""
    model = ddp.model(case).float()
    cap = 100 / 2**20  # 100-byte buckets: three of the MLP's
    wrapped = nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=cap)
    wrapped.register_comm_hook(group, hook)
    grads = []
    for step in range(2):  # the second backward runs on the rebuilt buckets
        wrapped.zero_grad(set_to_none=True)
        x, y = (t.float() for t in ddp.data(case, rank, step))
        nn.functional.mse_loss(wrapped(x), y).backward()
        grads += ddp.grads(model)
    return grads


def learn(fn, case, rank, world, group):
    watch = HookWatch(group, fn.__code__.co_filename)
    dist.all_reduce = c10d.all_reduce = watch.all_reduce
    try:
        return [*_train(watch.wrap(fn), case, rank, group), not watch.blocking]
    finally:
        dist.all_reduce = c10d.all_reduce = watch.real


def expect(case, rank, world, group):
    names = [f"step {s + 1}: {n}" for s in range(2) for n in ddp.names(ddp.model(case))]
    grads = _train(default_hooks.fp16_compress_hook, case, rank, group)
    return Expected([*grads, True], [*names, "the Future completed only after its all-reduce"])


EXERCISE = Exercise(
    reference="torch DDP with torch's fp16_compress_hook registered (gloo), float32, torch.equal",
    learn=learn, expect=expect, cases=ddp.CASES, draw=ddp.draw, generated=2, processes=True,
    reference_processes=True, prepare=ddp.warm, diagnose=2,
    answers=("torch.distributed.algorithms.ddp_comm_hooks.default_hooks", "minidp.ddp.hooks"),
)  # fmt: skip
