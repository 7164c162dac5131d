"""The collectives a unit runs, on whichever group it was given.

minidp's own (``minidp.comm``, built from send/recv, gloo's bits) wherever the group can
send and receive. A group that has collectives but no send/recv — torch's threaded test
world (``FSDPTestMultiThread``), or any ``ProcessGroup`` subclass written in Python without
``send``/``recv`` — runs the group's *own* collectives instead, with FSDP2's ops (AVG for
fp32/bf16), so the bits are the ones FSDP2 gets on that group. Such a world keeps its
groups per thread, so the root runs them on the calling thread (:class:`Inline`).

Test: ``pytest tests/test_fsdp_threaded.py``
"""

from __future__ import annotations

from concurrent.futures import Future

import torch
import torch.distributed as dist

from minidp.comm import all_gather, all_gather_into_tensor, all_reduce, reduce_scatter_tensor

_OPS = {"sum": "SUM", "avg": "AVG"}


def has_send_recv(group) -> bool:
    """False for a Python subclass of ``ProcessGroup`` that does not define ``send``: its
    ``send``/``recv`` are the base class's, which no backend stands behind."""
    cls = type(group)
    if not (isinstance(group, dist.ProcessGroup) and cls is not dist.ProcessGroup):
        return True  # torch's own groups (C++ backends), gloo objects, wrappers
    return any("send" in c.__dict__ for c in cls.__mro__[: cls.__mro__.index(dist.ProcessGroup)])


def check_collectives(group) -> None:
    """At ``fully_shard``: a group without send/recv must have the collectives FSDP runs."""
    if has_send_recv(group):
        return
    needed = ("allgather", "reduce_scatter", "allreduce")
    cls = type(group)
    own = [c for c in cls.__mro__[: cls.__mro__.index(dist.ProcessGroup)]]
    missing = [n for n in needed if not any(n in c.__dict__ for c in own)]
    if missing:
        raise RuntimeError(
            f"fully_shard: expected a process group with send/recv, or with its own "
            f"{', '.join(needed)}; got {cls.__name__}, which has no send/recv and no "
            f"{', '.join(missing)}. Hint: use a gloo or nccl group "
            "(torch.distributed.init_process_group)"
        )


def gather_into(output: torch.Tensor, mine: torch.Tensor, group) -> None:
    """``(world, T)`` ``output``: every rank's ``(T,)`` row (``mine`` may be its own row)."""
    if has_send_recv(group):
        all_gather_into_tensor(output, mine, group=group)
    else:
        own = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        own(output.view(-1), mine.clone(), group=group)


def gather_list(outputs: list[torch.Tensor], mine: torch.Tensor, group) -> None:
    if has_send_recv(group):
        all_gather(outputs, mine, group=group)
    else:
        dist.all_gather(outputs, mine, group=group)


def reduce_scatter(flat: torch.Tensor, op: str, group) -> torch.Tensor:
    """This rank's ``(T,)`` piece of the reduction of ``flat`` ``(world * T,)``."""
    mine = flat.new_empty(flat.numel() // group.size())  # (T,) rank-local
    if has_send_recv(group):  # gloo's bits; flat (rank-local scratch) is lent to the ring
        return reduce_scatter_tensor(mine, flat, op, group, input_is_scratch=True)
    own = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    own(mine, flat, op=getattr(dist.ReduceOp, _OPS[op]), group=group)
    return mine


def all_reduce_(tensor: torch.Tensor, op: str, group) -> None:
    if has_send_recv(group):
        all_reduce(tensor, op, group)
    else:
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, _OPS[op]), group=group)


class Inline:
    """A stand-in for the communication thread that runs each task at once, here."""

    def submit(self, fn, *args) -> Future:
        done: Future = Future()
        done.set_result(fn(*args))
        return done
