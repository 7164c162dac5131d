"""``minidp.comm.reduce_scatter`` and ``reduce_scatter_tensor`` against gloo's (thread worlds).

Run: ``pytest tests/test_reduce_scatter.py``

gloo builds both from its all-reduce: the tensor form all-reduces the whole input and keeps
this rank's piece, the list form all-reduces each input on its own. Both are checked
``torch.equal`` to gloo's own (torch >= 2.8; before, gloo has no reduce-scatter and the
reference is that construction, which the native one is checked to equal; so it is where
gloo's ignores the op and sums, as 2.8's does, a bug not copied) for every world
size 2-8 and chunk sizes 0-65536, every float dtype and op; ZeRO-2's ``input_is_scratch``
gives the same bits and bytes; the two forms are told apart by the header check, and a
wrong input is refused on every rank.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from helpers import GLOO_OPS, NO_GLOO_REDUCE_SCATTER, gloo_all_reduce, rank_input
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minidp.comm import MismatchError, count_traffic, reduce_scatter, reduce_scatter_tensor
from minidp.comm import group as groups
from minidp.launch import WorkerError, run_threads

OPS = ["sum", "avg", "max", "min", "product"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64]


def _native(kind: str, out: torch.Tensor, inp: torch.Tensor, op: str) -> bool:
    """gloo's own reduce-scatter into ``out``; False where this torch's gloo has none."""
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = GLOO_OPS[op]
    g = groups.resolve()
    try:
        if kind == "tensor":
            g._reduce_scatter_base(out, inp.clone(), opts).wait()
        else:
            g.reduce_scatter([out], [[t.clone() for t in inp.chunk(g.size())]], opts).wait()
    except RuntimeError as e:  # torch < 2.8 (or an op it lacks there)
        if NO_GLOO_REDUCE_SCATTER not in str(e) and "AVG" not in str(e):
            raise
        return False
    return op == "sum" or _applies_its_op(g)


def _applies_its_op(g) -> bool:
    """Whether gloo's reduce-scatter applies the op it is given: torch 2.8's sums whatever
    the op (AVG undivided, MAX a sum), a torch bug minidp does not copy; there the
    reference is the construction (all-reduce with the op). The same answer on every rank."""
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = dist.ReduceOp.MAX
    out = torch.empty(1)
    g._reduce_scatter_base(out, torch.ones(g.size()), opts).wait()
    return out.item() == 1.0  # the max of ones; a sum would be the world size


def _cases(rank: int, world: int, sizes: list[int], dtype, op: str, seed: int, both: bool):
    """Every size: ours (tensor form, scratch, list form) against gloo's own, else (torch <
    2.8, or ``both``) against the construction gloo runs; the bytes with and without scratch."""
    wrong = []
    for n in sizes:
        x = rank_input(rank, world * n, dtype, seed + n)  # (world * n,) rank-local
        if dtype.is_floating_point and op in ("sum", "avg"):  # mixed magnitudes: the order
            # of additions shows; float16 within 2**±10, so sums of 8 ranks stay finite
            top = 10 if dtype == torch.float16 else 30
            scale = rank_input(rank + 7, world * n, torch.float32, seed).mul(top / 3).round()
            x = (x.float() * torch.exp2(scale.clamp(-top, top))).to(dtype)
        want = {k: torch.empty(n, dtype=dtype) for k in ("tensor", "list")}
        native = _native("tensor", want["tensor"], x, op) and _native("list", want["list"], x, op)
        checks = {}
        if both or not native:  # gloo's construction: all-reduce the whole / each input
            whole = gloo_all_reduce(x.clone(), op)[rank * n : (rank + 1) * n]
            each = [gloo_all_reduce(x[i * n : (i + 1) * n].clone(), op) for i in range(world)]
            if native:
                checks["gloo's tensor form == its construction"] = torch.equal(
                    want["tensor"], whole
                )
                checks["gloo's list form == its construction"] = torch.equal(
                    want["list"], each[rank]
                )
            want = {"tensor": whole, "list": each[rank]}
        kept = x.clone()
        with count_traffic() as copied:
            tensor = reduce_scatter_tensor(torch.empty(n, dtype=dtype), x, op)
        unchanged = torch.equal(x, kept)
        with count_traffic() as lent:
            scratch = reduce_scatter_tensor(
                torch.empty(n, dtype=dtype), x.clone(), op, input_is_scratch=True
            )
        pieces = list(x.split(n)) if n else [x] * world  # (n,) each
        listed = reduce_scatter(torch.empty(n, dtype=dtype), pieces, op)
        checks |= {
            "tensor form == gloo's": torch.equal(tensor, want["tensor"]),
            "scratch == tensor form": torch.equal(scratch, tensor),
            "list form == gloo's": torch.equal(listed, want["list"]),
            "input unchanged": unchanged,
            "same bytes with scratch": copied.sent_bytes == lent.sent_bytes,
        }
        wrong += [(n, what) for what, ok in checks.items() if not ok]
    return wrong


# one thread world per example, a few sizes in it (65536: the edge cases below, once per world)
FAST = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(
    world=st.integers(2, 8),
    sizes=st.lists(
        st.one_of(st.integers(0, 2 * 8), st.integers(17, 4100)),
        min_size=1,
        max_size=3,
    ),
    dtype=st.sampled_from(DTYPES),
    op=st.sampled_from(OPS),
    seed=st.integers(0, 10**4),
)
def test_both_forms_equal_gloos_bit_for_bit(world, sizes, dtype, op, seed):
    if op == "avg" and not dtype.is_floating_point:
        op = "sum"  # an integer average is refused (test_collectives)
    if op == "product":
        sizes = [min(n, 300) for n in sizes]
    for rank, wrong in enumerate(run_threads(_cases, world, sizes, dtype, op, seed, False)):
        assert wrong == [], f"rank {rank} of {world}, {dtype} {op}: (size, check) {wrong}"


@pytest.mark.parametrize("world", range(2, 9))
def test_every_world_size_at_the_edges(world):
    """Each world size once, on what the drawn cases may miss: chunk sizes 0 and 1, one
    below and above the world size (empty and ragged gloo chunks), and 65536 (chunks that
    do not fall on the ranks' pieces); and gloo's own equal to the construction."""
    sizes = [0, 1, world - 1, world + 1, 7, 65_536]
    for rank, wrong in enumerate(run_threads(_cases, world, sizes, torch.float32, "sum", 3, True)):
        assert wrong == [], f"rank {rank}: (size, check) {wrong}"


def _bytes(rank: int, world: int, n: int) -> tuple[int, int]:
    x = torch.ones(world * n)
    with count_traffic() as t:
        reduce_scatter_tensor(torch.empty(n), x)
    return t.sent_bytes


def test_bytes_are_a_reduce_scatters_not_an_all_reduces():
    """gloo runs an all-reduce, 2(W-1)/W of the input; here the ring's (W-1)/W plus the
    parts of each chunk another rank keeps, plus the header."""
    world, n = 4, 10 << 18  # 10 MiB per rank's piece: gloo's chunks are 3 x 1 MiB segments
    sent = run_threads(_bytes, world, n)
    total = world * n * 4
    ring = (world - 1) / world * total
    assert all(ring < b < 1.5 * ring < 2 * ring for b in sent), (sent, ring)


def _mixed_forms(rank: int, world: int) -> None:
    out = torch.empty(3)
    if rank == 0:
        reduce_scatter_tensor(out, torch.ones(3 * world))
    else:
        reduce_scatter(out, [torch.ones(3)] * world)


def test_the_two_forms_do_not_pair_up():
    """They add in different orders (different chunks), so a mix would be garbage or a
    message of the wrong size: the header check refuses it on every rank."""
    with pytest.raises(WorkerError, match=r"rank 1 passed \[reduce_scatter, .*\] but rank 0 "
                       r"passed \[reduce_scatter_tensor") as info:  # fmt: skip
        run_threads(_mixed_forms, 3, timeout=20)
    assert len(info.value.failures) == 3
    assert {f.exc_type for f in info.value.failures} == {MismatchError.__name__}


def _wrong_input(rank: int, world: int) -> None:
    reduce_scatter_tensor(torch.empty(2), torch.ones(3))


def test_a_wrong_input_is_refused_on_every_rank():
    with pytest.raises(
        WorkerError,
        match=r"reduce_scatter_tensor: expected a contiguous torch.float32 input of 2 x 2 "
        r"elements, got \(3,\)",
    ) as info:
        run_threads(_wrong_input, 2, timeout=20)
    assert len(info.value.failures) == 2
