"""The FSDP exercise (``fsdp_unit``) cuts every parameter as the book's FSDP page and FSDP2
do: dim 0, ``torch.chunk`` rows per rank — the page's padded pieces without their padding.

Run: ``pytest tests/test_fsdp_exercise.py``

Its solution, stub, slips and wrong solutions: ``tests/test_exercises.py``.
"""

from __future__ import annotations

import pytest
import torch

from minidp.textbook.zero import pieces
from minidp.tools.exercise.specs.clip_grad_norm_shards import shard


@pytest.mark.parametrize("rows,world", [(5, 2), (5, 3), (2, 3), (5, 4), (1, 5)])
def test_the_exercises_shards_are_the_books_pieces_without_padding(rows, world):
    t = torch.arange(rows * 3.0).view(rows, 3)
    for rank, piece in enumerate(pieces(t, world)):
        mine = shard(t, world, rank)
        assert torch.equal(piece[: mine.shape[0]], mine)
        assert not piece[mine.shape[0] :].any()  # the rest of the piece is padding
