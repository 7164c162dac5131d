"""The wrong norms and clips of ``clip_grad_norm_shards`` learners, recomputed from the full
gradients so that the judge can recognise them: a local norm, summed norms, no abs(),
squares averaged or maxed, no square root, clipped copies, no clamp, no 1e-6.

Test: ``pytest tests/test_exercise_set_a.py -k clip_grad``
"""

from __future__ import annotations

import math

import torch

from minidp.tools.exercise.spec import Result

INF = math.inf


def shard(t: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """Rank ``rank``'s ``torch.chunk`` rows of ``t`` (empty when the chunks run out)."""
    chunks = t.chunk(world)
    return chunks[rank].clone() if rank < len(chunks) else t.new_empty((0, *t.shape[1:]))


def _norms(case, full: list[torch.Tensor], world: int) -> list[float]:
    """Each rank's local norm of its shards (float64)."""
    p = case["norm_type"]
    out = []
    for rank in range(world):
        flat = torch.cat([shard(t, world, rank).double().reshape(-1) for t in full])
        out.append(float(torch.linalg.vector_norm(flat, p)) if flat.numel() else 0.0)
    return out


def _close(a, b: float, rtol: float = 1e-6) -> bool:
    return isinstance(a, (int, float)) and math.isclose(a, b, rel_tol=rtol, abs_tol=1e-9)


def _scaled_by(r: Result, rank: int, world: int, coef: float) -> bool:
    """Every shard is the unclipped shard times ``coef``."""
    return all(
        isinstance(g, torch.Tensor)
        and g.shape == (s := shard(t, world, rank)).shape
        and torch.allclose(g.double(), s.double() * coef, rtol=1e-6, atol=1e-9)
        for g, t in zip(r.got[1:], r.extra["full"])
    )


def _local_norm(case, results) -> bool:
    world = len(results)
    local = _norms(case, results[0].extra["full"], world)
    return (
        world > 1
        and all(_close(r.got[0], n) for r, n in zip(results, local))
        and any(not _close(r.got[0], r.expected[0]) for r in results)
    )


def _summed(case, results) -> bool:
    """The per-rank norms (2-norm) or maxima (inf) were added up."""
    world = len(results)
    total = sum(_norms(case, results[0].extra["full"], world))
    return world > 1 and all(
        _close(r.got[0], total) and not _close(r.got[0], r.expected[0]) for r in results
    )


def _no_clamp(case, results) -> bool:
    """Right norm; the shards scaled by max_norm / norm although that is > 1."""
    world = len(results)
    norm = results[0].expected[0]
    coef = case["max_norm"] / (norm + 1e-6)
    return coef > 1.01 and all(
        _close(r.got[0], norm, 1e-9) and _scaled_by(r, rank, world, coef)
        for rank, r in enumerate(results)
    )


def _no_eps(case, results) -> bool:
    """Right norm; the shards scaled by max_norm / norm, without torch's + 1e-6."""
    world = len(results)
    norm = results[0].expected[0]
    coef = case["max_norm"] / norm if norm else INF
    return coef < 1 and all(
        _close(r.got[0], norm, 1e-9) and _scaled_by(r, rank, world, coef)
        for rank, r in enumerate(results)
    )


def _all_norm(r: Result, value: float) -> bool:
    return _close(r.got[0], value) and not _close(r.got[0], r.expected[0])


def _norm_is(value_of):
    """A detector: every rank returned ``value_of(case, full, world)`` as the norm."""

    def matches(case, results) -> bool:
        value = value_of(case, results[0].extra["full"], len(results))
        return value is not None and all(_all_norm(r, value) for r in results)

    return matches


def _signed_max(case, full, world):
    if case["norm_type"] != INF:
        return None
    return max(float(t.double().max()) for t in full if t.numel())


def _squares(case, full, world) -> float:
    return sum(float((t.double() ** 2).sum()) for t in full)


def _squares_averaged(case, full, world):
    return (_squares(case, full, world) / world) ** 0.5 if case["norm_type"] != INF else None


def _no_sqrt(case, full, world):
    return _squares(case, full, world) if case["norm_type"] != INF else None


def _squares_max(case, full, world):
    if case["norm_type"] == INF or world < 2:
        return None
    return max(_norms(case, full, world))


def _copies(case, results) -> bool:
    """Right norm, a clip was due, and the shards are untouched: clipped copies."""
    world, norm = len(results), results[0].expected[0]
    return case["max_norm"] / (norm + 1e-6) < 0.99 and all(
        _close(r.got[0], norm, 1e-9) and _scaled_by(r, rank, world, 1.0)
        for rank, r in enumerate(results)
    )
