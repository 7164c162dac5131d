"""Reliability of ``minidp.comm``: the cases a fault-and-bad-input review found, each
against what torch / gloo does with the same inputs.

* two threads of a rank running collectives on one group at once, in separate channels;
* ``src`` names a *global* rank on a subgroup; a rank outside the group gets torch's
  warning and a no-op (real processes: ``dist.new_group`` needs a default group);
* ``MINIDP_DEBUG`` accepts exactly what ``TORCH_DISTRIBUTED_DEBUG`` accepts;
* checked mode compares call sites a ``chdir`` does not change;
* NaN under every op (max/min: gloo's NaN rule), and expanded (stride-0) tensors, bit for
  bit with gloo.

Run: ``pytest tests/test_reliability_comm.py``
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import tempfile
import threading
import warnings

import pytest
import torch
import torch.distributed as dist
from helpers import direct_reduce, gloo_all_reduce, rank_input

import minidp
from minidp.comm import agree, p2p
from minidp.launch import run_threads

# ---- channels: two threads, one group ---------------------------------------------------


def _two_threads(rank: int, world: int) -> list[bool]:
    """Channel 0 (this thread) and DDP's channel (a second thread) all-reduce at once."""
    a, b = rank_input(rank, 5000, torch.float32, 1), rank_input(rank, 3000, torch.float32, 2)
    ref_a, ref_b = gloo_all_reduce(a.clone(), "sum"), gloo_all_reduce(b.clone(), "sum")
    group = minidp.comm.group.resolve()
    got_b = b.clone()

    def other() -> None:
        with minidp.comm.use_group(group), minidp.comm.channel(p2p.DDP_CHANNEL):
            for _ in range(5):
                minidp.comm.all_reduce(got_b.copy_(b))

    thread = threading.Thread(target=other)
    thread.start()
    for _ in range(5):
        got_a = minidp.comm.all_reduce(a.clone())
    thread.join()
    return [torch.equal(got_a, ref_a), torch.equal(got_b, ref_b)]


@pytest.mark.parametrize("world", [2, 3])
def test_channels_keep_concurrent_collectives_apart(world):
    assert run_threads(_two_threads, world, timeout=20) == [[True, True]] * world


def test_channel_number_is_checked():
    with pytest.raises(ValueError, match=r"channel: expected an int in \[0, 31\], got 32"):
        with minidp.comm.channel(32):
            pass


# ---- subgroups: global ranks, non-members ------------------------------------------------


def _subgroup_cases(rank: int, world: int) -> dict:
    sub = dist.new_group([1, 2])  # rank 0: torch's placeholder for "not a member"
    out = {}
    x = torch.tensor([10.0 + rank, 20.0 + rank])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ref, ours = x.clone(), x.clone()
        dist.broadcast(ref, src=1, group=sub)
        minidp.comm.broadcast(ours, src=1, group=sub)
        out["src=1"] = (ref.tolist(), ours.tolist())
        ref, ours = x.clone(), x.clone()
        dist.all_reduce(ref, group=sub)
        minidp.comm.all_reduce(ours, group=sub)
        out["all_reduce"] = (ref.tolist(), ours.tolist())
    out["warnings"] = [str(w.message) for w in caught]
    out["rank, size"] = (
        (dist.get_rank(sub), dist.get_world_size(sub)),
        (minidp.comm.get_rank(sub), minidp.comm.get_world_size(sub)),
    )
    if rank != 0:
        ref, ours = x.clone(), x.clone()
        if "group_src" in inspect.signature(dist.broadcast).parameters:
            dist.broadcast(ref, group=sub, group_src=1)
        else:  # older torch (2.4) has no group_src: the same root named by its global rank
            dist.broadcast(ref, group=sub, src=dist.get_global_rank(sub, 1))
        minidp.comm.broadcast(ours, group=sub, group_src=1)
        out["group_src=1"] = (ref.tolist(), ours.tolist())
        errors = []
        for call in (dist.broadcast, minidp.comm.broadcast):
            try:
                call(x.clone(), src=0, group=sub)  # global rank 0 is not in [1, 2]
            except ValueError as exc:
                errors.append(str(exc))
        out["src=0"] = errors
    dist.barrier()
    return out


@pytest.fixture(scope="module")
def subgroup(process_world):
    return process_world(3).run(_subgroup_cases)


def test_src_is_a_global_rank_like_torch(subgroup):
    for rank in (1, 2):
        ref, ours = subgroup[rank]["src=1"]
        assert ours == ref == [11.0, 21.0]  # global rank 1's values, not group rank 1's
        ref, ours = subgroup[rank]["group_src=1"]
        assert ours == ref == [12.0, 22.0]  # group rank 1 = global rank 2
        ref, ours = subgroup[rank]["all_reduce"]
        assert ours == ref
        assert subgroup[rank]["rank, size"] == ((rank - 1, 2), (rank - 1, 2))


def test_src_outside_the_group_raises_like_torch(subgroup):
    for rank in (1, 2):
        theirs, ours = subgroup[rank]["src=0"]
        assert "Global rank 0 is not part of group" in theirs
        assert "src=0 is a global rank, and it is not in this group, whose ranks are [1, 2]" in ours


def test_non_member_warns_and_does_nothing_like_torch(subgroup):
    out = subgroup[0]
    assert out["src=1"] == ([10.0, 20.0], [10.0, 20.0])  # untouched
    assert out["all_reduce"] == ([10.0, 20.0], [10.0, 20.0])
    assert out["rank, size"] == ((-1, -1), (-1, -1))
    for op in ("broadcast", "all_reduce"):
        text = f"Running {op} on global rank 0 which does not belong to the given group."
        assert out["warnings"].count(text) == 2, out["warnings"]  # torch's, then minidp's
    assert subgroup[1]["warnings"] == []


# ---- MINIDP_DEBUG ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["DETAILS", " DETAIL", "1", "garbage", "true"])
def test_unknown_debug_level_is_rejected(value):
    with pytest.raises(ValueError, match=r"MINIDP_DEBUG must be one of OFF, INFO, DETAIL"):
        agree.debug_level(value)


@pytest.mark.parametrize("value", ["detail", "DETAIL", "off", "INFO", "DETAILS", " DETAIL", "1"])
def test_debug_levels_are_torchs(monkeypatch, value):
    """Accepted and rejected exactly where TORCH_DISTRIBUTED_DEBUG is (set -> read back)."""
    before = dist.get_debug_level()
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", value)
    try:
        dist.set_debug_level_from_env()
        torch_level = str(dist.get_debug_level()).rsplit(".", 1)[-1]
    except ValueError:
        torch_level = None
    finally:
        dist.set_debug_level(before)
    try:
        ours = agree.debug_level(value)
    except ValueError:
        ours = None
    assert ours == torch_level


def test_mistyped_debug_env_fails_at_import():
    env = dict(os.environ, MINIDP_DEBUG="DETAILS")
    run = subprocess.run(
        [sys.executable, "-c", "import minidp"], env=env, capture_output=True, text=True
    )
    assert run.returncode != 0
    assert "MINIDP_DEBUG must be one of OFF, INFO, DETAIL (any case), got 'DETAILS'" in run.stderr


# ---- checked mode: stable call sites -----------------------------------------------------


def _checked_after_chdir(rank: int, world: int) -> list[float]:
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as elsewhere:
        if rank == 1:
            os.chdir(elsewhere)  # a relative file path would now differ from rank 0's
        try:
            with minidp.comm.checked():
                return minidp.comm.all_reduce(torch.ones(3)).tolist()
        finally:
            os.chdir(cwd)


def test_checked_mode_survives_chdir(process_world):
    assert process_world(2).run(_checked_after_chdir) == [[2.0] * 3] * 2


# ---- NaN under max/min, expanded tensors: gloo's bits ------------------------------------


def _nan_cases(rank: int, world: int) -> list[str]:
    """Every case where minidp's bits differ from gloo's all_reduce (NaN payloads too)."""
    bad = []
    for dtype, bits in ((torch.float32, torch.int32), (torch.float64, torch.int64)):
        for seed in range(4):
            g = torch.Generator().manual_seed(seed * 100 + rank)
            x = torch.randn(37, generator=g).to(dtype)
            x[torch.rand(37, generator=g) < 0.4] = float("nan")
            # max/min: gloo's NaN rule; the others: a two-rank direct all-reduce reduces in
            # one pass (+ and * commute), whose bits must still be gloo's, NaNs included
            for op in ("max", "min", "sum", "product", "avg"):
                ref = gloo_all_reduce(x.clone(), op)
                for algorithm in ("ring", "direct"):  # auto picks direct at this size
                    ours = minidp.comm.all_reduce(x.clone(), op, algorithm=algorithm)
                    if not torch.equal(ref.view(bits), ours.view(bits)):
                        bad.append(f"{dtype} seed {seed} {op} {algorithm}: gloo {ref} ours {ours}")
    return bad


@pytest.mark.parametrize("world", [2, 3, 4])
def test_nan_under_every_op_matches_gloo_bit_for_bit(world):
    assert run_threads(_nan_cases, world) == [[]] * world


def _expanded_cases(rank: int, world: int) -> list[bool]:
    """An expanded tensor reduces each memory location once: gloo's all_reduce of the
    un-expanded tensor is the reference (gloo itself, given the expanded tensor, reads and
    writes past the end of its storage: the heap corrupts, so it cannot be run here)."""
    same = []
    for seed in range(3):
        base = rank_input(rank, 2, torch.float32, seed, shape=(2, 1)) * 1000
        ref = gloo_all_reduce(base.clone(), "sum")
        # the parameter server sums in rank order: its own reference, from every input
        ref_naive = direct_reduce(
            [rank_input(r, 2, torch.float32, seed, shape=(2, 1)) * 1000 for r in range(world)],
            "sum",
        )
        for algorithm, expected in (("ring", ref), ("direct", ref), ("naive", ref_naive)):
            ours = base.clone().expand(2, 3)
            minidp.comm.all_reduce(ours, algorithm=algorithm)
            same.append(torch.equal(ours, expected.expand(2, 3)))
        ours = base.clone().expand(2, 3)
        minidp.comm.broadcast(ours, src=world - 1)
        root = rank_input(world - 1, 2, torch.float32, seed, shape=(2, 1)) * 1000
        same.append(torch.equal(ours, root.expand(2, 3)))
    return same


@pytest.mark.parametrize("world", [2, 3])
def test_expanded_tensor_like_gloo(world):
    assert all(all(r) for r in run_threads(_expanded_cases, world))
