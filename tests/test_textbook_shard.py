"""The book's FSDP and HSDP pages against torch's FSDP2, bit for bit.

``minidp.textbook.fsdp.FSDP`` cuts every parameter on dim 0 as FSDP2 does, so after each
AdamW step a rank's piece must be ``torch.equal`` to FSDP2's ``p.to_local()`` (the rows it
owns; padding rows are zero on both sides). Why the bits can match: at 2 ranks a
reduce-scatter is one addition, and FSDP2's divide-by-2 (before the sum, on gloo) and the
book's average (after it) give the same bits — halving is exact. HSDP at 2 x 2: the same
within the row, then one more halving addition down the column.

A mutation proves the check can fail: the book's reduce-scatter with "sum" instead of
"avg" (the classic forgotten average) differs from FSDP2 at the first step.

Run: ``pytest tests/test_textbook_shard.py``
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import FSDP2_UNUSABLE
from torch import nn

from minidp.textbook.collectives import reduce_scatter
from minidp.textbook.fsdp import FSDP
from minidp.textbook.hsdp import HSDP
from minidp.textbook.zero import pieces

pytestmark = pytest.mark.skipif(FSDP2_UNUSABLE is not None, reason=str(FSDP2_UNUSABLE))


def _model() -> nn.Module:
    torch.manual_seed(0)  # 5 rows in the middle layer: padded at 2 ranks (3 + 2 rows)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3), nn.Linear(3, 1, bias=False))


def _fsdp2(model: nn.Module, mesh) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    return fully_shard(model, mesh=mesh)  # one unit, as the book's page


def _train(model, opt, rank: int, steps: int, reduce=None) -> None:
    g = torch.Generator().manual_seed(10 + rank)
    for _ in range(steps):
        opt.zero_grad()
        x, y = torch.randn(4, 6, generator=g), torch.randn(4, 1, generator=g)
        F.mse_loss(model(x), y).backward()
        if reduce is not None:
            reduce()
        opt.step()


class ForgetsTheAverage(FSDP):
    """The mutation: the gradients summed over the ranks, never divided."""

    def _reduce(self, grad: torch.Tensor) -> torch.Tensor:
        parts = pieces(grad, self.group.size())
        return reduce_scatter(torch.empty_like(parts[0]), parts, "sum", self.group)


def book_vs_fsdp2(rank: int, world: int, shape: tuple, page=None) -> list:
    """Three AdamW steps through the book's page and through FSDP2; every mismatch."""
    from torch.distributed.device_mesh import init_device_mesh

    names = ("replicate", "shard") if len(shape) == 2 else None
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    theirs = _fsdp2(_model(), mesh)
    ours = HSDP(_model(), mesh) if len(shape) == 2 else (page or FSDP)(_model())
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1) for m in (theirs, ours)]
    bad = []
    for step in range(3):
        _train(theirs, opts[0], rank, 1)
        _train(ours, opts[1], rank, 1, ours.reduce_grads)
        for (name, p), shard in zip(theirs.named_parameters(), ours.shards):
            local = p.to_local().detach()
            mine = shard.detach()[: local.shape[0]]
            if not torch.equal(local, mine):
                bad.append((step, name, (local - mine).abs().max().item()))
    return bad


@pytest.fixture(scope="module")
def two(process_world):
    return process_world(2)


def test_fsdp_page_equals_fsdp2_bit_for_bit(two):
    assert two.run(book_vs_fsdp2, (2,)) == [[], []]


def test_a_forgotten_average_is_caught(two):
    assert all(two.run(book_vs_fsdp2, (2,), ForgetsTheAverage)), "the comparison cannot fail"


def test_hsdp_page_equals_fsdp2_hsdp_on_a_2x2_mesh(process_world):
    assert process_world(4).run(book_vs_fsdp2, (2, 2)) == [[], [], [], []]


def test_pieces_are_fsdp2_rows_with_zero_padding():
    t = torch.arange(10.0).view(5, 2)
    parts = pieces(t, 2)
    assert [tuple(p.shape) for p in parts] == [(3, 2), (3, 2)]
    assert torch.equal(torch.cat(parts)[:5], t) and torch.equal(parts[1][2], torch.zeros(2))
