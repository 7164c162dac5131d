"""What the collective exercises share: cases, what is refused, the bytes sent."""

from minidp.tools.exercise.inputs import spare

DTYPES = ("int64", "float32", "float64", "float16", "bfloat16", "int32", "int8", "uint8")
# worlds 1..5 (odd ones too), numel < world, 2-D, every dtype, the empty tensor, and a group
# that is not the whole world (``spare`` ranks outside it)
CASES = tuple({"world": w, "shape": s, "dtype": d, "seed": i, **more}
              for i, (w, s, d, more) in enumerate((
    (1, (3,), "int64", {}), (2, (4,), "int64", {}), (3, (6,), "float32", {}),
    (3, (2,), "int32", {}), (4, (3, 5), "float64", {}), (5, (7,), "float16", {}),
    (5, (3,), "bfloat16", {}), (4, (9,), "int8", {}), (3, (0,), "float32", {}),
    (3, (5,), "float32", {"spare": 1}))))  # fmt: skip
# what *is* the answer where the exercise is a collective: minidp's public collectives
# wherever they are defined, every function of the modules that build them, the book's
COLLECTIVES = (*(f"minidp.comm.{name}" for name in (
    "all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather",
    "all_gather_into_tensor", "broadcast", "ring_all_reduce", "naive_all_reduce",
    "collectives", "direct", "ring", "naive", "broadcasts")),
    "minidp.textbook.collectives")  # fmt: skip


def draw(rng) -> dict:
    """World 1..5, 1-2 dims of 0..6 (numel < world too), any dtype; a subgroup 1 in 4."""
    shape = tuple(rng.randint(0, 6) for _ in range(rng.randint(1, 2)))
    more = spare(rng)
    return {"world": rng.randint(1, 5), "shape": shape, "dtype": rng.choice(DTYPES),
            "seed": rng.randint(0, 99), **more}  # fmt: skip


def exactly(per_rank):
    """Traffic bounds: each rank sends exactly ``per_rank(case, world, rank)`` bytes."""
    return lambda case, world: [(n, n) for n in (per_rank(case, world, r) for r in range(world))]


def least_all_reduce(elements, element_size: int = 8):
    """An all-reduce of ``elements`` (or ``case -> count``) sends >= (W-1)/W of them per rank."""

    def bounds(case, world: int):
        n = elements(case) if callable(elements) else elements
        return [((world - 1) * n * element_size // world, None)] * world

    return bounds
