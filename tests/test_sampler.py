"""DistributedSampler: the same indices as torch's, for every rank, epoch and option.

Run: ``pytest tests/test_sampler.py``
"""

from __future__ import annotations

import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

import minidp
from minidp.launch import run_threads


@settings(max_examples=400, deadline=None)
@given(
    length=st.integers(0, 120),
    world=st.integers(1, 9),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 50),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
)
def test_indices_match_torch(length, world, seed, epoch, shuffle, drop_last):
    data = range(length)
    for rank in range(world):
        kw = dict(num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        ours = minidp.DistributedSampler(data, **kw)
        theirs = torch.utils.data.DistributedSampler(data, **kw)
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(theirs)
        assert len(ours) == len(theirs)


def test_reference_example():
    """len 10 over 3 ranks: padding repeats the head; drop_last cuts the tail."""
    padded = [list(minidp.DistributedSampler(range(10), 3, r, shuffle=False)) for r in range(3)]
    assert padded == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    kw = dict(shuffle=False, drop_last=True)
    dropped = [list(minidp.DistributedSampler(range(10), 3, r, **kw)) for r in range(3)]
    assert dropped == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


def _default_rank(rank, world):
    s = minidp.DistributedSampler(range(7), shuffle=False)
    return s.rank, s.num_replicas, list(s)


def test_rank_and_world_default_to_the_current_group():
    assert run_threads(_default_rank, 2) == [(0, 2, [0, 2, 4, 6]), (1, 2, [1, 3, 5, 0])]


def test_bad_rank():
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\] for num_replicas=3, got 3"):
        minidp.DistributedSampler(range(5), num_replicas=3, rank=3)
    with pytest.raises(ValueError, match="num_replicas must be >= 1, got 0"):
        minidp.DistributedSampler(range(5), num_replicas=0, rank=0)
