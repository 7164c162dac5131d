"""``broadcast`` (lesson 9) vs gloo's broadcast, ``torch.equal``, in place; ``src`` not
always 0; the root sends at least once, nobody more than W-1 tensors."""

from minidp.tools.exercise import reference
from minidp.tools.exercise.inputs import nbytes, values
from minidp.tools.exercise.spec import Exercise, Traffic
from minidp.tools.exercise.specs import comm


def learn(fn, case, rank, world, group):
    fn(mine := values(case, rank), case["src"], group)
    return mine


def _bytes(case, world: int) -> list[tuple[int, int]]:
    n = nbytes(case)
    return [(n if r == case["src"] else 0, (world - 1) * n) for r in range(world)]


EXERCISE = Exercise(
    reference="torch.distributed.broadcast (gloo), torch.equal", learn=learn,
    expect=lambda case, rank, world, group: reference.broadcast(values(case, rank),
                                                                case["src"], group),
    cases=tuple({**c, "src": (3 * i) % c["world"]} for i, c in enumerate(comm.CASES)),
    draw=lambda rng: {**(c := comm.draw(rng)), "src": rng.randrange(c["world"])},
    answers=comm.COLLECTIVES,
    traffic=Traffic(_bytes, "a broadcast's: the tensor once into each rank but the root"),
)  # fmt: skip
