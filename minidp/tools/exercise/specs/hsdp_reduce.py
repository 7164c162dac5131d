"""``hsdp_reduce`` (lesson 37) on a replicate x shard mesh (row-major like
``init_device_mesh``), vs all_reduce / W and ``torch.chunk(S)`` rows (groups of 4 and 5
run out of rows); bytes held to what the stub's tools send here (+25%)."""

import torch

from minidp.comm import all_reduce, reduce_scatter
from minidp.tools.exercise import reference
from minidp.tools.exercise.inputs import values
from minidp.tools.exercise.learner_group import PostOffice, View, Wire
from minidp.tools.exercise.spec import Exercise, Expected, Traffic

TOLS = {"float64": (1e-12, 1e-12), "float32": (1e-5, 1e-6), "float16": (4e-3, 4e-3),
        "bfloat16": (3e-2, 3e-2)}  # fmt: skip


def mesh(group, case, rank: int, world: int):
    """This rank's row (shard group) and column (replicate group), views of ``group``."""
    r, s = case["replicate"], world // case["replicate"]
    row, col = divmod(rank, s)
    return (group.sub([row * s + j for j in range(s)], "shard"),
            group.sub([i * s + col for i in range(r)], "replicate"))  # fmt: skip


def _stub_tools(case, rank: int, world: int, group) -> int:
    """The budget: what this rank sends with the stub's tools (reduce_scatter, all_reduce)."""
    wire = Wire(group, PostOffice())  # (a post office per rank: counted, not matched)
    shard, replicate = mesh(View(wire, list(range(world))), case, rank, world)
    grad, s = values(case, rank), shard.size()
    k = -(-grad.shape[0] // s)
    padded = torch.cat([grad, grad.new_zeros((k * s - grad.shape[0], *grad.shape[1:]))])
    reduce_scatter(piece := torch.empty_like(padded[:k]), list(padded.split(k)), group=shard)
    all_reduce(piece, group=replicate)
    return wire.counts["bytes"]


def expect(case, rank, world, group):
    total = reference.all_reduce(values(case, rank), group) / world
    chunks, i = total.chunk(world // case["replicate"]), rank % (world // case["replicate"])
    mine = chunks[i].clone() if i < len(chunks) else total.new_empty((0, *total.shape[1:]))
    return Expected(mine, traffic=(0, _stub_tools(case, rank, world, group) * 5 // 4))


def draw(rng):
    r, s = rng.choice([(r, s) for r in (1, 2, 3) for s in range(1, 6) if r * s <= 8])
    rows, cols = rng.randint(1, 9), rng.randint(0, 3)
    return {"world": r * s, "replicate": r, "shape": (rows, cols) if cols else (rows,),
            "dtype": rng.choice(list(TOLS)), "seed": rng.randint(0, 99)}  # fmt: skip


CASES = tuple({"world": w, "replicate": r, "shape": s, "dtype": d, "seed": i}
              for i, (w, r, s, d) in enumerate((
    (1, 1, (3, 2), "float32"), (2, 1, (4, 2), "float32"), (2, 2, (3,), "float64"),
    (4, 2, (4, 3), "float32"), (4, 2, (5, 2), "bfloat16"), (3, 1, (2, 2), "float64"),
    (6, 2, (7, 2), "float32"), (6, 3, (4,), "float16"),
    # shard groups of 4 and 5 with empty chunks (5 rows on 4: 2, 2, 1, -; 6 on 5: 2, 2, 2, -, -)
    (4, 1, (5, 2), "float64"), (5, 1, (6,), "float32"), (8, 2, (5, 3), "float32"))))  # fmt: skip
EXERCISE = Exercise(
    reference="gloo all_reduce (SUM) on the whole world / W, torch.chunk(S)[shard rank]; "
    "torch.equal when W is a power of two, else a few ulps",
    learn=lambda fn, case, rank, world, group: fn(values(case, rank),
                                                  *mesh(group, case, rank, world)),
    expect=expect, cases=CASES, draw=draw,
    tolerance=lambda c: None if c["world"] & (c["world"] - 1) == 0 else TOLS[c["dtype"]],
    traffic=Traffic(None, "what minidp's reduce_scatter and all_reduce send here (+25%)"),
)  # fmt: skip
