"""What a case is and the inputs it makes: built the same way in the sandbox and the judge.

A case is a plain dict (``{"world": 3, "shape": (5,), "dtype": "float32", "seed": 0}``);
both halves of a check rebuild a rank's inputs from it with explicit generators, so the
sandbox (which runs the learner's code) and the judge (which runs torch's) see the same
tensors without handing any over.

:func:`values` is the input of every collective exercise. It is chosen so that a right
answer equals torch's *bit for bit* whatever order the learner adds in, and a
precision-losing shortcut cannot: numbers ``±m·2^e`` (``m`` in 0..7) with ``e`` in a range
per dtype where any sum of up to 16 of them is exact — so non-integers (0.75, 1.5), large
and small magnitudes together (float32: 0.002 to 1792), mixed signs and negative zero, but
a sum routed through ``int8``, ``float16`` or ``bfloat16`` loses digits (a ring that adds
through int8 returns ``[1, 44, 0]`` for ``[1.5, 300, 0.75]``).

Test: ``pytest tests/test_exercise_guards.py -k values``
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

Case = dict  # one case: {"world": 3, "shape": (5,), "dtype": "int64", "seed": 0, ...}

# float dtype -> (emin, emax): 16 terms of m*2^e (m < 8) need emax - emin + 7 bits, within
# the dtype's significand (53, 24, 11, 8): every partial sum exact, in any order
EXPONENTS = {"float64": (-20, 19), "float32": (-9, 8), "float16": (-2, 2), "bfloat16": (-1, 0)}
# int dtype -> the largest |value|: sums of 5 ranks' values still fit (uint8: 0..51)
INT_LIMITS = {"int64": 2**40, "int32": 2**20, "int16": 2**9, "int8": 25, "uint8": 51}


def describe(case: Case) -> str:
    """``world=3 shape=(5,) dtype=int64 seed=0`` — how a case is printed (this key order)."""
    first = [k for k in ("world", "shape", "dtype", "seed") if k in case]
    return " ".join(f"{k}={case[k]}" for k in first + sorted(set(case) - set(first)))


def dtype_of(case: Case) -> torch.dtype:
    return getattr(torch, case.get("dtype", "float32"))


def generator(case: Case, rank: int, salt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(case.get("seed", 0) * 1009 + rank * 31 + salt)


def dyadic(
    shape: tuple, dtype: torch.dtype, g: torch.Generator, exponents: tuple[int, int] | None = None
) -> torch.Tensor:
    """``±m·2^e`` in ``dtype``: exact sums of up to 16 (see the module docstring);
    ``exponents`` narrows ``e`` where products must stay exact too."""
    name = str(dtype).replace("torch.", "")
    low, high = exponents or EXPONENTS[name]
    m = torch.randint(0, 8, shape, generator=g, dtype=torch.float64)
    e = torch.randint(low, high + 1, shape, generator=g).double()
    sign = torch.randint(0, 2, shape, generator=g).double() * 2 - 1
    return (sign * m * torch.exp2(e)).to(dtype)  # m == 0 with sign -1: negative zero


def integers(shape: tuple, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    """Small and large integers of both signs (uint8: not negative) whose sums of 5 fit."""
    name = str(dtype).replace("torch.", "")
    limit = INT_LIMITS[name]
    small = torch.randint(-7, 8, shape, generator=g)
    large = torch.randint(limit // 8, limit + 1, shape, generator=g)
    large = large * (torch.randint(0, 2, shape, generator=g) * 2 - 1)
    pick = torch.randint(0, 2, shape, generator=g).bool()
    out = torch.where(pick, large, small)
    return (out.abs() if name == "uint8" else out).clamp(-limit, limit).to(dtype)


def values(case: Case, rank: int, salt: int = 0) -> torch.Tensor:
    """This rank's input for ``case`` (its ``shape`` or ``numel`` and ``dtype``)."""
    dtype = dtype_of(case)
    shape = tuple(case.get("shape", (case.get("numel", 4),)))
    g = generator(case, rank, salt)
    if dtype.is_floating_point:
        return dyadic(shape, dtype, g)
    return integers(shape, dtype, g)


def world_and_seed(low: int, high: int, **more):
    """Hypothesis strategy of ``{"world": low..high, "seed": 0..99, **more}`` (``more``:
    key -> a fixed value or a strategy), for exercises whose inputs come from the seed."""
    from hypothesis import strategies as st

    keys = {"world": st.integers(low, high), "seed": st.integers(0, 99)}
    keys.update({k: v if hasattr(v, "example") else st.just(v) for k, v in more.items()})
    return st.fixed_dictionaries(keys)


RANK_KEYS = ("src", "dst", "root")  # case keys holding a rank: kept below the world size


def simpler(case: Case) -> Iterable[Case]:
    """Candidate cases smaller than ``case``, most promising first (for shrinking)."""
    for w in range(1, case.get("world", 1)):
        yield {**case, "world": w, **{k: min(case[k], w - 1) for k in RANK_KEYS if k in case}}
    for k in RANK_KEYS:
        if case.get(k, 0) > 0:
            yield {**case, k: 0}
    shape = tuple(case.get("shape", ()))
    for i, n in enumerate(shape):
        for smaller in sorted({0, 1, n // 2, n - 1}):
            if 0 <= smaller < n:
                yield {**case, "shape": shape[:i] + (smaller,) + shape[i + 1 :]}
    if len(shape) > 1:
        yield {**case, "shape": (int(torch.Size(shape).numel()),)}
    if case.get("seed", 0) != 0:
        yield {**case, "seed": 0}
