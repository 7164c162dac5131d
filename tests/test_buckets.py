"""Bucket assignment: minidp's function against torch's, on random sizes, dtypes and limits.

``torch.distributed._compute_bucket_assignment_by_size`` is torch's C++ implementation
(private, used here only as the reference). Without ``tensor_indices`` (the first layout)
the results must be identical. With ``tensor_indices`` (the rebuild in gradient-ready
order) the buckets still open at the end come out in the order of a C++ hash map; with
one dtype that order is unique and results must be identical, with several we compare
the buckets as a set — real models (one dtype) are covered exactly by tests/test_ddp.py,
which compares the layouts of torch's live reducer.

The cap rules (``bucket_cap_mb`` -> caps -> limits) are compared two ways: with torch's
private ``_BucketCapacityConfig`` where it exists (torch 2.12 on), and on every torch by
watching a live torch DDP lay out a model whose parameter sizes straddle every cap.

Run: ``pytest tests/test_buckets.py``
"""

from __future__ import annotations

import copy
import sys

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ddp_support import _layout

import minidp
from minidp.ddp import compute_bucket_assignment_by_size
from minidp.ddp.buckets import BucketCaps, build_buckets

DTYPES = [torch.float32, torch.float16, torch.float64, torch.bfloat16]

tensor_lists = st.lists(
    st.tuples(st.integers(1, 3000), st.sampled_from(DTYPES)), min_size=1, max_size=25
)
limit_lists = st.lists(st.integers(1, 20000), min_size=1, max_size=3) | st.just([sys.maxsize])


def _tensors(spec):
    return [torch.empty(n, dtype=d) for n, d in spec]


@settings(max_examples=300, deadline=None)
@given(spec=tensor_lists, limits=limit_lists, data=st.data())
def test_first_layout_matches_torch(spec, limits, data):
    tensors = _tensors(spec)
    sparse = data.draw(
        st.lists(st.booleans(), min_size=len(spec), max_size=len(spec)) | st.just([])
    )
    ours = compute_bucket_assignment_by_size(tensors, limits, sparse)
    theirs = dist._compute_bucket_assignment_by_size(tensors, limits, sparse)
    assert ours == (theirs[0], theirs[1])


@settings(max_examples=300, deadline=None)
@given(spec=tensor_lists, limits=limit_lists, data=st.data())
def test_rebuild_layout_matches_torch(spec, limits, data):
    tensors = _tensors(spec)
    order = data.draw(st.permutations(range(len(spec))))
    ours, our_limits = compute_bucket_assignment_by_size(tensors, limits, tensor_indices=order)
    theirs, their_limits = dist._compute_bucket_assignment_by_size(tensors, limits, [], order)
    if len({d for _, d in spec}) == 1:
        assert (ours, our_limits) == (theirs, their_limits)
    else:  # open buckets of several dtypes: torch's order is its hash map's
        assert sorted(zip(ours, our_limits)) == sorted(zip(theirs, their_limits))


def test_paper_example():
    """Sizes in bytes with [1 MiB, 25 MiB]: a bucket closes once it reaches its cap."""
    sizes = [400, 1_200_000, 40, 800_000, 200_000, 28_000_000, 12]
    tensors = [torch.empty(s, dtype=torch.uint8) for s in sizes]
    buckets, limits = compute_bucket_assignment_by_size(tensors, [1 << 20, 25 << 20])
    assert buckets == [[0, 1], [2, 3, 4, 5], [6]]
    assert limits == [1 << 20, 25 << 20, 25 << 20]


CAPS_MB = [None, 0.001, 1, 5, 25, 100]


@pytest.mark.parametrize("cap_mb", CAPS_MB)
@pytest.mark.parametrize("find_unused", [False, True])
def test_cap_rules_match_torch(cap_mb, find_unused):
    try:
        from torch.nn.parallel.distributed import _BucketCapacityConfig
    except ImportError:  # torch 2.11 and older derive the caps inline in DDP's constructor
        pytest.skip(
            f"torch {torch.__version__} has no _BucketCapacityConfig; "
            "test_cap_rules_match_live_torch_ddp checks the rules on a live DDP instead"
        )
    torch_caps = _BucketCapacityConfig.create(cap_mb, None, False)
    caps = BucketCaps.from_mb(cap_mb)
    assert (caps.cap, caps.first_cap) == (
        torch_caps.bucket_bytes_cap,
        torch_caps.first_bucket_bytes_cap,
    )
    initial, _ = torch_caps.compute_bucket_size_limits(False, find_unused)
    assert caps.initial_limits(find_unused) == initial


class Straddle(nn.Module):
    """Parameters of 400 B, 1.2 MB, 40 B, 6.4 MB, 400 KB, 800 KB, 12 B (float32): every cap in
    CAPS_MB, and the 1 MiB first bucket, falls somewhere inside them, in either order."""

    def __init__(self) -> None:
        super().__init__()
        sizes = [100, 300_000, 10, 1_600_000, 100_000, 200_000, 3]
        self.ps = nn.ParameterList(nn.Parameter(torch.zeros(n)) for n in sizes)

    def forward(self, x):
        return sum(p.sum() * (i + 1) for i, p in enumerate(self.ps)) * x


def observe_caps(rank: int, world: int) -> dict:
    """Per (cap_mb, find_unused): bucket cap and layouts of torch DDP and minidp DDP, first
    as built, then after two iterations (the rebuild in ready order, with the first cap)."""
    out = {}
    for cap_mb in CAPS_MB:
        for find_unused in (False, True):
            kwargs = {"find_unused_parameters": find_unused}
            if cap_mb is not None:  # not passing it is what selects the 1 MiB first bucket
                kwargs["bucket_cap_mb"] = cap_mb
            model = Straddle()
            ref = nn.parallel.DistributedDataParallel(copy.deepcopy(model), **kwargs)
            mine = minidp.DistributedDataParallel(copy.deepcopy(model), **kwargs)
            params = list(ref.module.parameters())
            seen = [(ref.bucket_bytes_cap, _layout(ref, params), mine.bucket_bytes_cap)]
            seen[0] += (list(mine.reducer.assignment),)
            for _ in range(2):
                ref(torch.ones(())).backward()
                mine(torch.ones(())).backward()
            seen.append((None, _layout(ref, params), None, list(mine.reducer.assignment)))
            out[cap_mb, find_unused] = seen
    return out


def test_cap_rules_match_live_torch_ddp(process_world):
    """On any torch: minidp's caps give the layouts the installed torch's DDP builds."""
    observed = process_world(2).run(observe_caps)[0]
    for (cap_mb, find_unused), seen in observed.items():
        for when, (torch_cap, torch_layout, our_cap, our_layout) in zip(("first", "rebuilt"), seen):
            where = f"bucket_cap_mb={cap_mb}, find_unused_parameters={find_unused}, {when}"
            assert our_cap == torch_cap, f"{where}: cap {our_cap} B, torch's {torch_cap} B"
            assert our_layout == torch_layout, f"{where}: layout differs from torch's"
    # The model tells the rules apart: the default's 1 MiB first bucket, an explicit 25 MiB
    # (no small first bucket), 5 MiB and 1 MiB give four different rebuilt layouts.
    rebuilt = [observed[cap, False][1][1] for cap in (None, 25, 5, 1)]
    assert len({str(layout) for layout in rebuilt}) == 4, rebuilt


def test_bucket_views_follow_parameter_memory_layout():
    """A channels-last weight occupies its bucket slot in memory order, as in torch."""
    w = torch.randn(4, 3, 2, 2).to(memory_format=torch.channels_last)
    b = torch.randn(4)
    (bucket,), locator = build_buckets([[1, 0]], [w, b])
    assert locator == [(0, 1), (0, 0)] and bucket.offsets == [0, 4]
    bucket.views[1].copy_(w)
    # element k of w's memory is element 4 + k of the bucket
    memory_order = w.permute(0, 2, 3, 1).reshape(-1)
    assert torch.equal(bucket.buffer[4:], memory_order)


def test_errors():
    with pytest.raises(ValueError, match="expected at least one tensor"):
        compute_bucket_assignment_by_size([], [10])
    with pytest.raises(ValueError, match="tensor_indices has 1 entries but there are 2"):
        compute_bucket_assignment_by_size([torch.empty(1), torch.empty(1)], [10], (), [0])
