"""The header exchange posts the next call's receives ahead (gloo's rendezvous costs a
latency otherwise), and that state neither leaks groups nor mixes up collectives.

    pytest tests/test_headers.py
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import minidp
from minidp.comm import agree, headers
from minidp.comm import group as groups
from minidp.launch import run_threads


def _parked(group) -> int:
    return sum(len(p.recvs) for p in headers._posted.get(group, {}).values())


def _mixed_calls(rank: int, world: int):
    g = groups.resolve()
    before = _parked(g)
    x = torch.arange(6.0) * (rank + 1)
    minidp.comm.all_reduce(x)  # the first call posts the second call's receives
    after_one = _parked(g)
    b = torch.full((3,), float(rank))
    minidp.comm.broadcast(b, src=1)  # another kind of collective consumes them
    y = torch.ones(5, dtype=torch.float64)
    minidp.comm.all_reduce(y, op="max")
    return before, after_one, _parked(g), x, b, y, weakref.ref(g)


def test_next_headers_are_posted_ahead_and_freed_with_the_group():
    world = 3
    out = run_threads(_mixed_calls, world)
    total = sum(r + 1 for r in range(world))
    for before, after_one, after_three, x, b, y, _ in out:
        assert before == 0 and after_one == world - 1 and after_three == world - 1
        assert torch.equal(x, torch.arange(6.0) * total)
        assert torch.equal(b, torch.ones(3)) and torch.equal(y, torch.ones(5, dtype=torch.float64))
    refs = [r[-1] for r in out]
    del out
    gc.collect()
    assert all(ref() is None for ref in refs), "a finished world's group is kept alive"


def _mismatch_then_ok(rank: int, world: int):
    x = torch.zeros(4 if rank else 5)
    with pytest.raises(agree.MismatchError, match="rank 1 passed"):
        minidp.comm.all_reduce(x)
    z = torch.ones(4)
    minidp.comm.all_reduce(z)  # the parked receives still line up after a refused call
    return z


def test_a_refused_call_leaves_the_next_one_correct():
    for z in run_threads(_mismatch_then_ok, 2):
        assert torch.equal(z, torch.full((4,), 2.0))


class _Wrapped:
    """A group-like object around a real group (as the exercise checker hands learners):
    it gets the plain exchange, on the same gloo pairs as the parked receives."""

    def __init__(self, group) -> None:
        self._group = group

    def rank(self) -> int:
        return self._group.rank()

    def size(self) -> int:
        return self._group.size()

    def send(self, tensors, dst: int, tag: int = 0):
        return self._group.send(tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        return self._group.recv(tensors, src, tag)


def _raw_then_wrapped(rank: int, world: int):
    g = groups.resolve()
    x = torch.ones(3)
    minidp.comm.all_reduce(x)  # parks the next header's receives on g
    y = torch.ones(3)
    minidp.comm.all_reduce(y, group=_Wrapped(g))  # plain exchange, same pairs
    z = torch.ones(3)
    minidp.comm.all_reduce(z)  # and the parked ones are still the next raw call's
    return x, y, z


def test_plain_and_ahead_exchanges_share_a_group_without_crossing():
    for x, y, z in run_threads(_raw_then_wrapped, 2, timeout=20.0):
        assert torch.equal(x, torch.full((3,), 2.0))
        assert torch.equal(y, x) and torch.equal(z, x)
