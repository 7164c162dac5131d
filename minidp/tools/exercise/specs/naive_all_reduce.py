"""``naive_all_reduce`` (lesson 7) vs gloo's all_reduce, ``torch.equal``, in place; one
tensor to rank 0, W-1 back from it."""

from minidp.tools.exercise.inputs import nbytes
from minidp.tools.exercise.spec import Exercise, Traffic
from minidp.tools.exercise.specs.comm import CASES, COLLECTIVES, draw, exactly
from minidp.tools.exercise.specs.ring_all_reduce import expect, learn

SERVER = Traffic(exactly(lambda case, world, rank: (world - 1 if rank == 0 else 1) * nbytes(case)),
                 "the parameter server's (rank 0: W-1 tensors; others: one)")  # fmt: skip
EXERCISE = Exercise(reference="torch.distributed.all_reduce (gloo), torch.equal", learn=learn,
                    expect=expect, cases=CASES, draw=draw, answers=COLLECTIVES,
                    traffic=SERVER)  # fmt: skip
