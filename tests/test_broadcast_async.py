"""Several broadcasts in flight at once — ``broadcast(..., async_op=True)`` and
``broadcast_many`` (ZeRO-1's step) — against gloo's own broadcast.

Run: ``pytest tests/test_broadcast_async.py``

Every rank of a thread world (a real gloo group each) posts several broadcasts at once —
each rank a root, one root twice, a non-contiguous and an expanded tensor among them —
then waits, and each result is ``torch.equal`` to gloo's broadcast of the same input.
Ranks that disagree on ``broadcast_many``'s roots, shapes or dtypes raise together
before any data moves.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from helpers import rank_input

import minidp
from minidp.comm import group as groups
from minidp.launch import WorkerError, run_threads


def _inputs(rank: int, world: int) -> list[tuple[int, torch.Tensor]]:
    """(root, tensor) pairs, the same roots and shapes on every rank, values rank-local."""
    cases = [(r, rank_input(rank, 1000 + 37 * r, torch.float32, r)) for r in range(world)]
    cases.append((0, rank_input(rank, 65, torch.bfloat16, 9)))  # root 0 twice in flight
    cases.append((world - 1, rank_input(rank, 24, torch.float64, 3).view(4, 6).t()))  # (6, 4)
    cases.append((1, torch.full((1, 5), float(rank)).expand(3, 5)))  # one row of memory
    return cases


def _async_vs_gloo(rank: int, world: int, many: bool):
    ours = _inputs(rank, world)  # broadcast in place by minidp, all posted at once
    if many:
        tensors = [t for _, t in ours]
        assert minidp.comm.broadcast_many(tensors, [root for root, _ in ours]) is tensors
        handles = []
    else:
        handles = [minidp.comm.broadcast(t, group_src=root, async_op=True) for root, t in ours]
    done = [h.wait() for h in handles] + [h.wait() for h in handles]  # a second wait: no-op
    pg = groups.resolve()
    theirs = []
    for root, t in _inputs(rank, world):  # the same values again, one gloo broadcast each
        ref = t.contiguous()
        opts = dist.BroadcastOptions()
        opts.rootRank = root
        pg.broadcast([ref], opts).wait()
        theirs.append(ref)
    return [t for _, t in ours], theirs, done, [h.is_completed() for h in handles]


@pytest.mark.parametrize("many", [False, True], ids=["async_op", "broadcast_many"])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_broadcasts_in_flight_together_equal_gloo(world, many):
    for ours, theirs, done, completed in run_threads(_async_vs_gloo, world, many):
        assert all(done) and all(completed)
        assert len(ours) == len(theirs) == world + 3
        for mine, ref in zip(ours, theirs, strict=True):
            assert mine.dtype == ref.dtype and mine.shape == ref.shape
            assert torch.equal(mine, ref)
        assert not ours[-2].is_contiguous()  # the caller's own view got the root's values


def _bad_src_async(rank: int, world: int) -> None:
    minidp.comm.broadcast(torch.ones(3), src=world, async_op=True)


def test_async_broadcast_refuses_a_bad_root_on_every_rank():
    with pytest.raises(WorkerError, match=r"broadcast: src must be a rank in \[0, 1\] .* got 2"):
        run_threads(_bad_src_async, 2, timeout=20)


def _many_mismatch(rank: int, world: int, case: str) -> None:
    tensors, roots = [torch.zeros(4), torch.zeros(6)], [0, 1]
    if rank == 1 and case == "root":
        roots = [1, 1]
    if rank == 1 and case == "shape":
        tensors[1] = torch.zeros(2, 3)
    if rank == 1 and case == "dtype":
        tensors[0] = torch.zeros(4, dtype=torch.float64)
    if rank == 1 and case == "count":
        tensors, roots = tensors[:1], roots[:1]
    if rank == 0 and case == "not_a_tensor":
        tensors[1] = [0.0] * 6
    minidp.comm.broadcast_many(tensors, roots)


@pytest.mark.parametrize(
    "case, pattern",
    [
        ("root", r"broadcast_many: rank 1 passed \[.*fingerprint=\d+\] but rank 0 passed"),
        ("shape", r"broadcast_many: rank 1 passed \[.*fingerprint=\d+\] but rank 0 passed"),
        ("dtype", r"broadcast_many: rank 1 passed \[.*fingerprint=\d+\] but rank 0 passed"),
        ("count", r"rank 1 passed \[broadcast_many, shape \(1,\).* but rank 0 .*shape \(2,\)"),
        ("not_a_tensor", r"rank 0 raised TypeError: broadcast_many: expected a torch.Tensor"),
    ],
)
def test_broadcast_many_disagreement_raises_on_every_rank(case, pattern):
    with pytest.raises(WorkerError, match=pattern) as info:
        run_threads(_many_mismatch, 2, case, timeout=20)
    assert len(info.value.failures) == 2  # both ranks raised; neither hung


def test_broadcast_many_wants_one_root_per_tensor():
    with pytest.raises(ValueError, match=r"expected a list of tensors and one root per tensor"):
        minidp.comm.broadcast_many([torch.zeros(2)], [0, 1])
