"""The wrong answers HSDP learners give, recomputed from every rank's gradient so that the
judge can recognise them (``hsdp_reduce.py``'s mistakes): a factor of W, R or S, the row's
sum alone, the whole padded piece, the groups swapped, tensor_split's rows.

Test: ``pytest tests/test_exercise_set_a.py -k hsdp``
"""

from __future__ import annotations

import torch

from minidp.tools.exercise.mesh_group import mesh, row_and_column
from minidp.tools.exercise.spec import everywhere

# rtol and atol per dtype where W is not a power of two: a few ulps
TOLS = {"float64": (1e-12, 1e-12), "float32": (1e-5, 1e-6), "float16": (4e-3, 4e-3),
        "bfloat16": (3e-2, 3e-2)}  # fmt: skip


def _chunk(t: torch.Tensor, s: int, i: int) -> torch.Tensor:
    """Chunk ``i`` of ``torch.chunk(t, s)`` (dim 0), empty when the chunks run out."""
    chunks = t.chunk(s)
    return chunks[i].clone() if i < len(chunks) else t.new_empty((0, *t.shape[1:]))


def _like(got, value: torch.Tensor, dtype: str) -> bool:
    if not isinstance(got, torch.Tensor) or got.shape != value.shape:
        return False
    rtol, atol = TOLS[dtype]
    return bool(torch.allclose(got.double(), value.double(), rtol=rtol, atol=atol))


FACTORS = {"W": lambda r, s: r * s, "R": lambda r, s: r, "S": lambda r, s: s,
           "1/W": lambda r, s: 1 / (r * s)}  # fmt: skip


def _scaled(which: str):
    """Every rank's answer is the expected shard times ``FACTORS[which](R, S)`` — only
    where that factor is none of the others' (at 2×1, W = R: which slip is it?), so
    shrinking stops at a case whose hint is certain."""

    def matches(case, results) -> bool:
        r, s = mesh(case)
        f = FACTORS[which](r, s)
        others = {k: g(r, s) for k, g in FACTORS.items() if k != which}
        return (
            f != 1
            and f not in others.values()
            and everywhere(
                results, lambda rank, res: _like(res.got, res.expected.double() * f, case["dtype"])
            )
        )

    return matches


def _row_only(case, results) -> bool:
    """Reduce-scattered in the shard group and stopped: the row's sum / S or / W."""
    r, s = mesh(case)
    grads = results[0].extra["grads"]

    def test(rank, res) -> bool:
        row = sum(grads[g].double() for g in row_and_column(rank, r, s)[0])
        piece = _chunk(row, s, rank % s)
        return any(_like(res.got, piece / d, case["dtype"]) for d in {s, r * s})

    return r > 1 and everywhere(results, test)


def _answer_is(make):
    """A detector: every rank's answer is ``make(total / W, R, S, rank)`` (total: the SUM
    of every rank's gradient), and it is wrong somewhere."""

    def matches(case, results) -> bool:
        r, s = mesh(case)
        total = sum(g.double() for g in results[0].extra["grads"]) / (r * s)
        wrong = any(not _like(res.got, res.expected, case["dtype"]) for res in results)
        return wrong and everywhere(
            results,
            lambda rank, res: _like(
                res.got, make(total, r, s, rank).to(res.expected.dtype), case["dtype"]
            ),  # fmt: skip
        )

    return matches


def _padded_piece(avg: torch.Tensor, r: int, s: int, rank: int) -> torch.Tensor:
    """The reduce-scatter's whole piece: ceil(rows/S) rows, zero padding included."""
    k = -(-avg.shape[0] // s)
    padded = torch.cat([avg, avg.new_zeros((k * s - avg.shape[0], *avg.shape[1:]))])
    return padded[(rank % s) * k : (rank % s + 1) * k]


def _swapped(avg: torch.Tensor, r: int, s: int, rank: int) -> torch.Tensor:
    """Reduce-scattered across the replicate group and all-reduced in the shard group: the
    column's piece, cut by R, at this rank's replicate index."""
    return _chunk(avg, r, rank // s)


def _split_rows(avg: torch.Tensor, r: int, s: int, rank: int) -> torch.Tensor:
    """``tensor_split``'s rows (as even as possible) instead of ``torch.chunk``'s."""
    return avg.tensor_split(s)[rank % s]


def _full(case, results) -> bool:
    r, s = mesh(case)
    shape = tuple(case["shape"])
    return s > 1 and everywhere(
        results, lambda rank, res: isinstance(res.got, torch.Tensor) and res.got.shape == shape
    )
