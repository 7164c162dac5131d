"""Every collective's first message: the header, with a small all-reduce's data riding on it.

The exchange posts the next call's receives ahead (gloo's rendezvous costs a latency
otherwise), and that state neither leaks groups nor mixes up collectives; a small
all-reduce is one message per peer, check included; first messages of any mix of sizes
never abort the process (gloo aborts on a message longer than its receive buffer).

    pytest tests/test_headers.py
"""

from __future__ import annotations

import gc
import types
import weakref

import pytest
import torch

import minidp
from minidp.comm import agree, count_traffic, headers
from minidp.comm import group as groups
from minidp.launch import run_threads


def _parked(group) -> int:
    boxes = headers._boxes.get(group, {}).values()
    return sum(len(box.parked.recvs) for box in boxes if box.parked is not None)


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


def _one_message_per_peer(rank: int, world: int, numel: int):
    x = torch.full((numel,), float(rank + 1))
    minidp.comm.all_reduce(torch.ones(1))  # the first call on a group posts its own receives
    with count_traffic() as t:
        minidp.comm.all_reduce(x)
    return t, x


@pytest.mark.parametrize("world", [2, 3])
def test_a_small_all_reduce_is_one_message_per_peer_check_included(world):
    """Up to ``payload_bytes(world)`` the data rides on the header: W-1 messages each way, of
    the header and the tensor; one byte more and the header goes alone, then the ring."""
    for numel in (4, headers.payload_bytes(world) // 4):
        for t, x in run_threads(_one_message_per_peer, world, numel):
            assert torch.equal(x, torch.full((numel,), float(sum(range(1, world + 1)))))
            assert (t.sent_msgs, t.recv_msgs) == (world - 1, world - 1)
            assert t.sent_bytes == t.recv_bytes == (world - 1) * (agree.HEADER_BYTES + 4 * numel)
    big = headers.payload_bytes(world) // 4 + 1
    for t, _ in run_threads(_one_message_per_peer, world, big):
        assert t.sent_msgs > world - 1  # the header alone, then the ring's messages


def _mixed_sizes_around_the_limit(rank: int, world: int, numels: list[int]):
    x = torch.ones(numels[rank])
    with pytest.raises(agree.MismatchError, match=r"all_reduce: rank \d passed \[all_reduce"):
        minidp.comm.all_reduce(x)
    z = torch.full((3,), float(rank))
    minidp.comm.all_reduce(z)  # the next call still pairs up
    return z


@pytest.mark.parametrize(
    "numels",
    [
        [headers.payload_bytes(2) // 4, 3],  # the largest first message against a small one
        [headers.payload_bytes(2) // 4 + 1, headers.payload_bytes(2) // 4],  # header vs data
        [headers.payload_bytes(3) // 4, headers.payload_bytes(3) // 4 + 1, 4],
        [5, 4, 4],
    ],
)
def test_first_messages_of_any_sizes_refuse_and_never_abort(numels):
    """A longer message than its receive buffer would abort the process (gloo); every first
    message lands in a buffer of the largest, so mismatched sizes only raise, on every rank."""
    world = len(numels)
    for z in run_threads(_mixed_sizes_around_the_limit, world, numels, timeout=30):
        assert torch.equal(z, torch.full((3,), float(sum(range(world)))))


@pytest.mark.parametrize(
    "backend, room",
    [
        ("gloo", 256 << 10),  # takes a message shorter than its receive buffer
        ("cpu:gloo,cuda:nccl", 256 << 10),  # the headers are host tensors: gloo
        ("nccl", 0),  # a send and its receive must have one size: headers alone, exact
        ("cuda:nccl", 0),
    ],
)
def test_data_rides_on_the_header_only_where_the_headers_travel_on_gloo(monkeypatch, backend, room):
    """Decided explicitly per backend (the NCCL side runs on a GPU box: tests/test_gpu.py)."""
    monkeypatch.setattr(headers, "backend_of", lambda group: backend)
    three_ranks = types.SimpleNamespace(size=lambda: 3)  # what _room asks of a group
    assert headers._room(three_ranks) == room
