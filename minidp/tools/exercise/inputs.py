"""A case is a dict (``{"world": 3, "shape": (5,), "dtype": "float32", "seed": 0}``; with
``"spare": k``, ``k`` ranks more than the learner's group), its inputs built alike in sandbox
and judge. :func:`values`: ``±m·2^e`` (``m`` < 8) where any sum of up to 16 is exact, so a
right answer equals torch's bit for bit in any order, and one through a narrower dtype not."""

import torch

Case = dict
# float dtype -> (emin, emax): 16 terms of m*2^e need emax - emin + 7 bits of significand
EXPONENTS = {"float64": (-20, 19), "float32": (-9, 8), "float16": (-2, 2), "bfloat16": (-1, 0)}
# int dtype -> the largest |value|: sums of 5 ranks' values still fit (uint8: 0..51)
INT_LIMITS = {"int64": 2**40, "int32": 2**20, "int16": 2**9, "int8": 25, "uint8": 51}


def describe(case: Case) -> str:
    """``world=3 shape=(5,) dtype=int64 seed=0 ...``: how a case is printed."""
    first = [k for k in ("world", "shape", "dtype", "seed") if k in case]
    return " ".join(f"{k}={case[k]}" for k in first + sorted(set(case) - set(first)))


def generator(case: Case, rank: int, salt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(case.get("seed", 0) * 1009 + rank * 31 + salt)


def dyadic(shape, dtype: torch.dtype, g: torch.Generator, exponents=None) -> torch.Tensor:
    """``±m·2^e`` in ``dtype`` (``exponents`` narrower where products must stay exact)."""
    low, high = exponents or EXPONENTS[str(dtype).replace("torch.", "")]
    m = torch.randint(0, 8, shape, generator=g, dtype=torch.float64)
    e = torch.randint(low, high + 1, shape, generator=g).double()
    sign = torch.randint(0, 2, shape, generator=g).double() * 2 - 1
    return (sign * m * torch.exp2(e)).to(dtype)  # m == 0 with sign -1: negative zero


def values(case: Case, rank: int, salt: int = 0) -> torch.Tensor:
    """This rank's input: ``shape`` and ``dtype`` (integers small and large, both signs)."""
    name, shape = case.get("dtype", "float32"), tuple(case.get("shape", (4,)))
    dtype, g = getattr(torch, name), generator(case, rank, salt)
    if dtype.is_floating_point:
        return dyadic(shape, dtype, g)
    limit = INT_LIMITS[name]
    small = torch.randint(-7, 8, shape, generator=g)
    large = torch.randint(limit // 8, limit + 1, shape, generator=g)
    large = large * (torch.randint(0, 2, shape, generator=g) * 2 - 1)
    out = torch.where(torch.randint(0, 2, shape, generator=g).bool(), large, small)
    return (out.abs() if name == "uint8" else out).clamp(-limit, limit).to(dtype)


def spare(rng) -> dict:
    """A drawn case's group: a subgroup (one spare rank outside it) 1 in 4."""
    return {"spare": 1} if rng.random() < 0.25 else {}


def nbytes(case: Case, numel: int | None = None) -> int:
    numel = int(torch.Size(case.get("shape", (4,))).numel()) if numel is None else numel
    return numel * getattr(torch, case.get("dtype", "float32")).itemsize
