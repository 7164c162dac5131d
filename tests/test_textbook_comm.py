"""The textbook collectives (``minidp.textbook.collectives``) against gloo, on thread worlds.

Exactness: ``torch.equal`` against gloo wherever the arithmetic is order-independent —
copies (all_gather, broadcast), integers, max/min, and world 2 (one addition per
element). Float sums from world 3 on are compared, also with ``torch.equal``, against the
reduction computed from every rank's input in the textbook's own order
(``x[c] + (x[c+1] + (... + x[c-1]))`` per chunk c, gloo's association), since gloo cuts
chunks elsewhere.

Run: ``pytest tests/test_textbook_comm.py``
"""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidp.comm import group as groups
from minidp.comm import naive
from minidp.launch import run_threads
from minidp.textbook import collectives as textbook
from minidp.tools.exercise import reference

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32]
FAST = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def rank_input(rank: int, shape, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 101 + rank)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


COMBINE = {"sum": torch.add, "avg": torch.add, "max": torch.maximum, "min": torch.minimum}


def ring_order(pieces: list[torch.Tensor], op: str, c: int) -> torch.Tensor:
    """Chunk c's reduction in the ring's order (it travels left): start with rank c-1's
    piece, then ``x[r] OP acc`` for r = c-2, ..., c (mod world)."""
    world = len(pieces)
    acc = pieces[(c - 1) % world]
    for k in range(2, world + 1):
        acc = COMBINE[op](pieces[(c - k) % world], acc)
    return acc


def textbook_order(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    """The textbook ring all-reduce computed directly from every rank's input: chunk c
    (``tensor_split``) reduced in ring order; avg divides the finished sum."""
    world = len(inputs)
    flat = [x.reshape(-1) for x in inputs]
    out = torch.empty_like(flat[0])
    for c, idx in enumerate(torch.arange(flat[0].numel()).tensor_split(world)):
        acc = ring_order([x[idx] for x in flat], op, c)
        out[idx] = acc / world if op == "avg" else acc
    return out.view(inputs[0].shape)


shapes = st.lists(st.integers(0, 7), min_size=0, max_size=2).map(tuple)


# ----------------------------------------------------------------------------- ring all-reduce


def _ring(rank, world, shape, dtype, op, seed):
    x = rank_input(rank, shape, dtype, seed)
    ours = textbook.ring_all_reduce(x.clone(), op)
    theirs = reference.all_reduce(x.clone(), groups.resolve(), "sum" if op == "avg" else op)
    return x, ours, theirs


@FAST
@given(
    world=st.integers(1, 5),
    shape=shapes,
    dtype=st.sampled_from(DTYPES),
    op=st.sampled_from(["sum", "max", "min", "avg"]),
    seed=st.integers(0, 1000),
)
def test_ring_all_reduce(world, shape, dtype, op, seed):
    if op == "avg" and not dtype.is_floating_point:
        op = "sum"
    out = run_threads(_ring, world, shape, dtype, op, seed, timeout=30)
    inputs = [x for x, _, _ in out]
    expected = textbook_order(inputs, op)
    for _, ours, theirs in out:
        assert ours.shape == inputs[0].shape and ours.dtype == dtype
        assert torch.equal(ours, expected)  # the textbook's own order, bit for bit
        if op in ("max", "min") or not dtype.is_floating_point or world <= 2:
            # order-independent (avg: gloo summed it; the textbook divides the same sum)
            assert torch.equal(ours, theirs / world if op == "avg" else theirs)


def test_ring_all_reduce_differs_from_rank_order_sum_for_floats():
    """The textbook-order reference is not a tautology: at 3 ranks its float32 sum is not
    the rank-order sum ((x0 + x1) + x2) on every element."""
    out = run_threads(_ring, 3, (999,), torch.float32, "sum", 3, timeout=30)
    inputs = [x for x, _, _ in out]
    rank_order = (inputs[0] + inputs[1]) + inputs[2]
    assert torch.equal(out[0][1], textbook_order(inputs, "sum"))
    assert not torch.equal(out[0][1], rank_order)


def _ring_noncontiguous(rank, world):
    x = rank_input(rank, (4, 6), torch.int64, 0).t()  # (6, 4) view, not contiguous
    same = x
    textbook.ring_all_reduce(x)
    return same, reference.all_reduce(rank_input(rank, (4, 6), torch.int64, 0).t().contiguous(),
                                      groups.resolve())  # fmt: skip


def test_ring_all_reduce_non_contiguous_in_place():
    for ours, theirs in run_threads(_ring_noncontiguous, 3, timeout=30):
        assert torch.equal(ours, theirs)


# ----------------------------------------------------------------------------- the halves


def _gather_scatter(rank, world, shape, dtype, seed):
    g = groups.resolve()
    x = rank_input(rank, shape, dtype, seed)
    ours = [torch.empty_like(x) for _ in range(world)]
    textbook.all_gather(ours, x)
    pieces = [rank_input(rank, shape, dtype, seed + 1 + c) for c in range(world)]
    rs = textbook.reduce_scatter(torch.empty_like(x), [p.clone() for p in pieces])
    rs_gloo = reference.reduce_scatter([p.clone() for p in pieces], g)
    return x, ours, reference.all_gather(x, g), pieces, rs, rs_gloo


@FAST
@given(
    world=st.integers(1, 5), shape=shapes, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 99)
)
def test_all_gather_and_reduce_scatter(world, shape, dtype, seed):
    out = run_threads(_gather_scatter, world, shape, dtype, seed, timeout=30)
    for rank, (_, ours, theirs, _, rs, rs_gloo) in enumerate(out):
        assert len(ours) == world and all(torch.equal(a, b) for a, b in zip(ours, theirs))
        pieces = [o[3][rank] for o in out]  # every rank's piece number `rank`
        assert torch.equal(rs, ring_order(pieces, "sum", rank))  # textbook order, exactly
        if not dtype.is_floating_point or world <= 2:
            assert torch.equal(rs, rs_gloo)


def _broadcast(rank, world, shape, dtype, src):
    x = rank_input(rank, shape, dtype, 5)
    return textbook.broadcast(x.clone(), src), reference.broadcast(x.clone(), src, groups.resolve())


@FAST
@given(world=st.integers(1, 5), shape=shapes, dtype=st.sampled_from(DTYPES), data=st.data())
def test_broadcast_tree(world, shape, dtype, data):
    src = data.draw(st.integers(0, world - 1))
    for ours, theirs in run_threads(_broadcast, world, shape, dtype, src, timeout=30):
        assert torch.equal(ours, theirs)


# ----------------------------------------------------------------------------- bad input


def _bad_inputs(rank, world):
    x = torch.ones(4)
    with pytest.raises(ValueError, match="unsupported op 'median'"):
        textbook.ring_all_reduce(x, "median")
    with pytest.raises(TypeError, match="dtype torch.bool is not supported"):
        textbook.ring_all_reduce(torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"expected one output tensor per rank \(2\), got 1"):
        textbook.all_gather([torch.empty(4)], x)
    with pytest.raises(ValueError, match=r"expected 2 inputs of 4 elements .* got sizes \[4\]"):
        textbook.reduce_scatter(torch.empty(4), [x])
    with pytest.raises(ValueError, match=r"src must be a rank in \[0, 1\], got 2"):
        textbook.broadcast(x, src=2)
    return True


def test_bad_input_raises_clearly_on_every_rank():
    assert run_threads(_bad_inputs, 2, timeout=30) == [True, True]


MISMATCH = """
import torch, minidp
from minidp.comm import naive
from minidp.textbook import collectives as textbook
def f(rank, world, fn):
    fn(torch.ones(8 if rank == 0 else 2))
try:
    minidp.launch.run_threads(f, 2, minidp.comm.ring_all_reduce, timeout=10)
except minidp.launch.WorkerError as e:
    print("faithful:", str(e).splitlines()[0], flush=True)
minidp.launch.run_threads(f, 2, textbook.ring_all_reduce, timeout=10)
"""


@pytest.mark.slow
def test_mismatched_sizes_textbook_aborts_where_the_faithful_ring_refuses():
    """What the agreement check buys: ranks passing different sizes get a MismatchError
    from the faithful ring; the textbook ring sends a chunk longer than the receiver's
    buffer and gloo aborts the whole process (so run it in a child)."""
    proc = subprocess.run([sys.executable, "-c", MISMATCH], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert "faithful: run_threads: rank" in proc.stdout and "MismatchError" in proc.stdout
    assert proc.returncode != 0 and "Received data size doesn't match" in proc.stderr


# ----------------------------------------------------------------------------- the lessons


def _lesson(name: str):
    spec = importlib.util.spec_from_file_location(f"lesson_{name[:2]}", LESSONS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # cells that run sit under __main__: import is cheap
    return module


def test_lessons_show_the_real_textbook_source_not_a_copy(monkeypatch):
    monkeypatch.syspath_prepend(str(LESSONS))  # the lessons import their kit
    l08 = _lesson("08_ring_all_reduce.py")
    assert l08.TEXTBOOK_RING == (textbook._exchange, textbook.ring_all_reduce)
    shown = l08.source_of(*l08.TEXTBOOK_RING)
    assert shown == "\n".join(inspect.getsource(f) for f in l08.TEXTBOOK_RING)
    assert "def ring_all_reduce(" in shown
    l09 = _lesson("09_metrics_collectives.py")
    assert l09.TEXTBOOK_SHOWN == (textbook.all_gather, textbook.broadcast)
    assert _lesson("06_send_recv.py").SHOWN == (textbook._exchange,)
    assert _lesson("07_parameter_server.py").SHOWN == (naive.naive_all_reduce,)
    for name in ("06_send_recv.py", "07_parameter_server.py", "08_ring_all_reduce.py",
                 "09_metrics_collectives.py"):  # fmt: skip
        text = (LESSONS / name).read_text()
        for fn in ("ring_all_reduce", "all_gather", "broadcast", "_exchange", "naive_all_reduce"):
            assert f"def {fn}(" not in text, f"{name} copies {fn} instead of printing it"
        assert "inspect.getsource" in text
